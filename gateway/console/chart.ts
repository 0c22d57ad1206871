// The parts of Chart.js the console draws with, registered: imported by name so that the bundle keeps only these, and
// loaded on demand (pages/usage.tsx) so that a page's data need not wait for it.
import { BarController, BarElement, CategoryScale, Chart, Legend, LinearScale, Tooltip } from 'chart.js';

Chart.register(BarController, BarElement, CategoryScale, LinearScale, Legend, Tooltip);

export { Chart };
