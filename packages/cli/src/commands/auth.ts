/** Signing in and out, and who you are. */
import { loginWithApiKey, loginWithBrowser, logout } from '../login';
import type { CommandModule } from '.';

export const authCommands: CommandModule = (program, ctx) => {
  program
    .command('login')
    .description('Sign in through the browser (or with an API key); --profile keeps several logins apart')
    .option('--api-key <key>', 'sign in with an API key instead (or set SVC_API_KEY)')
    .action(async (o: { apiKey?: string }) => {
      const c = ctx();
      const key = o.apiKey ?? c.env.SVC_API_KEY;
      if (key) await loginWithApiKey(c, key);
      else await loginWithBrowser(c);
    });
  program
    .command('logout')
    .description("Sign out and forget the profile's saved credentials")
    .action(() => logout(ctx()));
  program
    .command('whoami')
    .description('Who you are signed in as')
    .action(async () => {
      const c = ctx();
      const me = await c.api().call('GET', '/auth/me');
      c.print(me, () => `${me.user.email} (tenant ${me.tenant.name}, role ${me.role}, signed in with ${me.credential.type})`);
    });
};
