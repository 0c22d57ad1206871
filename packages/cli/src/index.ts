export { buildProgram, run } from './main';
