/** The accounts' emails (CONTRACT.md 13): each carries one one-time link to a console page. */
import type { Email } from './outbox';

const link = (publicUrl: string, path: string) => `${publicUrl.replace(/\/$/, '')}${path}`;

export function invitationEmail(o: {
  to: string;
  tenantName: string;
  role: string;
  token: string;
  publicUrl: string;
  expiresAt: string;
}): Email {
  return {
    to: o.to,
    subject: `You are invited to ${o.tenantName}`,
    text: `You are invited to join ${o.tenantName} as ${o.role}.\n\nSet your name and password here (the link works once, until ${o.expiresAt}):\n${link(o.publicUrl, `/invitations/${o.token}`)}\n`,
  };
}

export function passwordResetEmail(o: { to: string; token: string; publicUrl: string; expiresAt: string }): Email {
  return {
    to: o.to,
    subject: 'Reset your password',
    text: `Someone asked to reset the password of this account. If it was you, choose a new one here (the link works once, until ${o.expiresAt}):\n${link(o.publicUrl, `/reset-password/${o.token}`)}\n\nIf it was not you, ignore this email: nothing changes.\n`,
  };
}

export function verificationEmail(o: { to: string; token: string; publicUrl: string; expiresAt: string }): Email {
  return {
    to: o.to,
    subject: 'Verify your email address',
    text: `Confirm that this address is yours (the link works once, until ${o.expiresAt}):\n${link(o.publicUrl, `/verify-email/${o.token}`)}\n`,
  };
}
