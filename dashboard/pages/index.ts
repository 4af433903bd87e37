import type { Hono } from 'hono';
import type { Deps } from '../../server/core/deps.js';
import type { DashEnv } from '../env.js';
import { accountPages } from './accounts.js';
import { capturedPages } from './captured.js';
import { databasePages } from './database.js';
import { domainTestEmailPages } from './domain-test-email.js';
import { domainPages } from './domains.js';
import { emailPages } from './emails.js';
import { overviewPages } from './overview.js';
import { postmasterPages } from './postmaster.js';
import { suppressionPages } from './suppressions.js';
import { templatePages } from './templates.js';
import { webhookPages } from './webhooks.js';

/** Every section's routes (paths relative to /dashboard), mounted behind the session and CSRF checks. */
export const PAGE_MODULES: ReadonlyArray<(deps: Deps) => Hono<DashEnv>> = [
  overviewPages,
  accountPages,
  domainPages,
  domainTestEmailPages,
  emailPages,
  capturedPages,
  webhookPages,
  templatePages,
  suppressionPages,
  databasePages,
  postmasterPages,
];
