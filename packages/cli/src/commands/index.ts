/**
 * Every command module of `svc`, one file per resource. A module adds its commands to the program; adding a command
 * is a file here and one line in this list.
 */
import type { Command } from 'commander';
import type { Context } from '../context';
import { agentCommands } from './agents';
import { apiCommand } from './api';
import { authCommands } from './auth';
import { chatCommands } from './chat';
import { completionCommand } from './completion';
import { eventCommands } from './events';
import { keyCommands } from './keys';
import { listenCommand } from './listen';
import { modelCommands } from './models';
import { projectCommands } from './projects';
import { requestCommands } from './requests';
import { secretCommands } from './secrets';
import { usageCommand } from './usage';
import { webhookCommands } from './webhooks';

export type CommandModule = (program: Command, ctx: () => Context) => void;

export const COMMAND_MODULES: CommandModule[] = [
  authCommands,
  projectCommands,
  agentCommands,
  chatCommands,
  modelCommands,
  keyCommands,
  webhookCommands,
  eventCommands,
  requestCommands,
  secretCommands,
  usageCommand,
  listenCommand,
  apiCommand,
  completionCommand,
];
