/**
 * Settings every system a test starts runs with, in process or as processes. Passwords are hashed at scrypt N=2^10
 * instead of 2^15 (PASSWORD_HASH_COST): a sign-up or sign-in then costs a few milliseconds of CPU, not about 120,
 * over the run's thousands of them. `login-flood` sets the production cost back: its flood must queue.
 */
export const TEST_SYSTEM_ENV: Record<string, string> = { PASSWORD_HASH_COST: '10' };
