import { layout } from './layout';

/** Console page path -> [the script's page name, the title]. The page itself is drawn by gateway/console. */
export const CONSOLE_PAGES: Record<string, readonly [string, string]> = {
  '/projects': ['projects', 'Projects'],
  '/usage': ['usage', 'Usage'],
};

/** A console page's shell: the navigation and an empty #app the console's script renders into. */
export function consolePage([page, title]: readonly [string, string], path: string): string {
  return layout({ title, page, signedIn: true, console: true, path: path.replace(/\/:.*$/, ''), body: '<div id="app"></div>' });
}
