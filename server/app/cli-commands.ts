// The operator CLI's commands; dist/server/app/cli.js (cli.ts) loads this after the runtime check and the load hooks.
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { DatabaseMissingError, databasePath, hasDatabase, openDatabase, type Store } from '../../db/client.js';
import { securePrivateDataDir } from '../../db/data-dir.js';
import { desc } from 'drizzle-orm';
import { type AccountRow, accounts } from '../../db/schema/index.js';
import { systemClock } from '../shared/clock.js';
import { type Config, loadConfig } from '../shared/config.js';
import {
  accountNameSchema,
  accountView,
  createTopLevelAccount,
  findAccount,
  grantCredits,
  OPERATOR_NUMBER_MIN,
  operatorSuspensionReasonSchema,
  readOperatorNumber,
  setDailyQuota,
  suspendByOperator,
  unsuspendByOperator,
} from '../core/accounts.js';
import { resetAdminToken } from '../core/admin-token.js';
import { databaseStatusOf } from '../core/customer-db.js';
import { insertKey, mintKeyInput } from '../core/keys.js';
import { enableWebhook, listAccountWebhooks } from '../core/webhook-operator.js';
import { SCOPES, isScope } from '../core/scopes.js';
import { ApiError } from '../shared/errors.js';
import { parseInput } from '../api/http/validate.js';

/** The operator CLI of docs/api/decisions.md section 1. JSON results on stdout; errors on stderr with a non-zero exit. */

class UsageError extends Error {}

const USAGE = `usage: mailstead <command> [options]

Works on the database in DATA_DIR (default ./data), which the server creates on its first start; it can run beside
the running server. Prints JSON on stdout; errors go to stderr (exit 1, or 2 for a usage error: an unknown command or
option, an option the command does not take, a missing or refused value).

  help, --help                  this text
  --version                     the version

  accounts create --name NAME [--credits N] [--daily-quota N]
  accounts list
  accounts set-quota --account ID --daily-quota N
  accounts suspend --account ID --reason TEXT
  accounts unsuspend --account ID
  credits grant --account ID --amount N
  keys create --account ID --name NAME [--scopes a,b]
  webhooks list --account ID    the account's webhook endpoints (never their secrets)
  webhooks enable --webhook ID  switch an endpoint back on without a test ping
  database status --account ID  the account's customer database: state, last error, writes waiting (never the URL)
  admin-token reset`;

/** Each command and the options it takes: any other option is a usage error, never silently ignored. */
const COMMANDS: Record<string, readonly OptionName[]> = {
  'accounts create': ['name', 'credits', 'daily-quota'],
  'accounts list': [],
  'accounts set-quota': ['account', 'daily-quota'],
  'accounts suspend': ['account', 'reason'],
  'accounts unsuspend': ['account'],
  'credits grant': ['account', 'amount'],
  'keys create': ['account', 'name', 'scopes'],
  'webhooks list': ['account'],
  'webhooks enable': ['webhook'],
  'database status': ['account'],
  'admin-token reset': [],
};

/** Options every command takes. */
const GLOBAL_OPTIONS: readonly OptionName[] = ['help', 'version'];

const OPTIONS = {
  name: { type: 'string' },
  credits: { type: 'string' },
  'daily-quota': { type: 'string' },
  account: { type: 'string' },
  reason: { type: 'string' },
  amount: { type: 'string' },
  scopes: { type: 'string' },
  webhook: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean' },
} as const;

type OptionName = keyof typeof OPTIONS;

type Options = { [K in keyof typeof OPTIONS]?: (typeof OPTIONS)[K]['type'] extends 'boolean' ? boolean : string };

function required(opts: Options, name: 'name' | 'account' | 'reason' | 'amount' | 'daily-quota' | 'webhook'): string {
  const v = opts[name];
  if (v === undefined || v === '') throw new UsageError(`--${name} is required`);
  return v;
}

function integer(name: string, value: string | undefined, min: number): number | undefined {
  if (value === undefined) return undefined;
  const n = readOperatorNumber(value, min);
  if (n === null) throw new UsageError(`--${name} must be an integer from ${min} to ${Number.MAX_SAFE_INTEGER}`);
  return n;
}

/** An option's value judged by the API's own schema; a value it refuses is a usage error (exit 2), as a bad number is. */
function optionInput<S extends Parameters<typeof parseInput>[0]>(schema: S, value: unknown, where: string): ReturnType<typeof parseInput<S>> {
  try {
    return parseInput(schema, value, where);
  } catch (err) {
    if (err instanceof ApiError) throw new UsageError(err.message);
    throw err;
  }
}

function parseCommandLine(argv: string[]): { command: string; opts: Options } {
  try {
    const { values, positionals } = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
    return { command: positionals.join(' '), opts: values as Options };
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
}

/** The package's version, from package.json beside the source tree or three levels up from dist/server/app. */
function packageVersion(): string {
  const candidates = [new URL('../../package.json', import.meta.url), new URL('../../../package.json', import.meta.url)].map((u) => fileURLToPath(u));
  const found = candidates.find((p) => existsSync(p));
  if (!found) throw new Error(`package.json not found (looked in ${candidates.join(', ')})`);
  return (JSON.parse(readFileSync(found, 'utf8')) as { version: string }).version;
}

/** What the command line asks for: text to print as is (help, version), or a command's JSON result. */
type Outcome = { text: string } | { result: unknown };

async function runCli(argv: string[], env: Record<string, string | undefined> = process.env): Promise<Outcome> {
  const { command, opts } = parseCommandLine(argv);
  if (opts.help || command === 'help') return { text: USAGE };
  if (opts.version) return { text: packageVersion() };
  if (command === '') throw new UsageError('');

  const takes = COMMANDS[command];
  if (!Object.hasOwn(COMMANDS, command) || takes === undefined) throw new UsageError(`unknown command "${command}"`);
  const stray = (Object.keys(opts) as OptionName[]).find((o) => !takes.includes(o) && !GLOBAL_OPTIONS.includes(o));
  if (stray !== undefined) throw new UsageError(`${command} does not take --${stray}`);

  const config = loadConfig(env);
  // Never a new, empty database: a DATA_DIR without one is the wrong directory, or a server never started.
  if (!hasDatabase(config.dataDir)) throw new DatabaseMissingError(databasePath(config.dataDir));
  // The same files as the server's, under the same rules: tightened before they are opened.
  for (const change of securePrivateDataDir(config.dataDir)) {
    process.stderr.write(`mailstead: tightened the permissions of ${change.path} from ${change.from} to ${change.to}\n`);
  }
  const store = openDatabase(config.dataDir, { mustExist: true });
  try {
    return { result: await runCommand(store, config, command, opts) };
  } finally {
    store.close();
  }
}

async function runCommand(store: Store, config: Config, command: string, opts: Options): Promise<unknown> {
  const deps = { db: store.db, clock: systemClock, config };
  const account = async (): Promise<AccountRow> => {
    const id = required(opts, 'account');
    const row = await findAccount(store.db, id);
    if (!row) throw new ApiError('not_found', `No account ${id}.`);
    return row;
  };
  const view = async (row: AccountRow | undefined) => {
    if (!row) throw new ApiError('not_found', 'The account no longer exists.');
    return await accountView(deps, row);
  };

  switch (command) {
    case 'accounts create': {
      const name = optionInput(accountNameSchema, required(opts, 'name'), '--name');
      const row = await createTopLevelAccount(deps, {
        name,
        credits: integer('credits', opts.credits, OPERATOR_NUMBER_MIN.credits),
        dailyQuota: integer('daily-quota', opts['daily-quota'], OPERATOR_NUMBER_MIN.dailyQuota),
      });
      const key = await insertKey(deps, { accountId: row.id, name: 'operator', scopes: SCOPES });
      return { account: await accountView(deps, row), key: key.key };
    }
    case 'accounts list': {
      const rows = await store.db.select().from(accounts).orderBy(desc(accounts.id));
      const data = [];
      for (const r of rows) data.push(await accountView(deps, r));
      return { data };
    }
    case 'accounts set-quota': {
      const quota = integer('daily-quota', required(opts, 'daily-quota'), OPERATOR_NUMBER_MIN.dailyQuota)!;
      return await view(await setDailyQuota(deps, (await account()).id, quota));
    }
    case 'accounts suspend': {
      const reason = optionInput(operatorSuspensionReasonSchema, required(opts, 'reason'), '--reason');
      return await view(await suspendByOperator(deps, (await account()).id, reason));
    }
    case 'accounts unsuspend':
      return await view(await unsuspendByOperator(deps, (await account()).id));
    case 'credits grant': {
      const amount = integer('amount', required(opts, 'amount'), OPERATOR_NUMBER_MIN.amount)!;
      const row = await account();
      // The arguments are well formed; the account is the wrong kind: a refusal (exit 1), not a usage error.
      if (row.parentId !== null) throw new Error("credits are granted to the top-level account; a sub-account's sends are paid by its parent");
      return await view(await grantCredits(deps, row.id, amount));
    }
    case 'keys create': {
      const row = await account();
      const scopes = opts.scopes
        ?.split(',')
        .map((s) => s.trim())
        .filter(Boolean);
      if (scopes?.length === 0) throw new UsageError(`--scopes names at least one scope: ${SCOPES.join(', ')}`);
      const unknown = scopes?.find((s) => !isScope(s));
      if (unknown !== undefined) throw new UsageError(`unknown scope "${unknown}"; scopes are ${SCOPES.join(', ')}`);
      const input = optionInput(mintKeyInput, { name: required(opts, 'name'), scopes }, 'options');
      return await insertKey(deps, { accountId: row.id, name: input.name, scopes: (input.scopes ?? SCOPES).filter(isScope) });
    }
    case 'webhooks list':
      return { data: await listAccountWebhooks(store.db, (await account()).id) };
    case 'webhooks enable':
      return await enableWebhook(store.db, required(opts, 'webhook'), deps.clock.now());
    case 'database status':
      return await databaseStatusOf(deps, (await account()).id);
    case 'admin-token reset':
      // The server puts ADMIN_TOKEN's hash back at every start: a token printed here would stop at the next one.
      if (config.adminToken !== null)
        throw new Error('ADMIN_TOKEN is set, and every start of the server signs in with it: change ADMIN_TOKEN and restart the server instead');
      return { token: await resetAdminToken(store.db) };
    default:
      throw new UsageError(`unknown command "${command}"`);
  }
}

async function main(): Promise<void> {
  try {
    const outcome = await runCli(process.argv.slice(2));
    process.stdout.write('text' in outcome ? `${outcome.text}\n` : `${JSON.stringify(outcome.result, null, 2)}\n`);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(err.message ? `mailstead: ${err.message}\n\n${USAGE}\n` : `${USAGE}\n`);
      process.exit(2);
    }
    process.stderr.write(`mailstead: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
}

await main();
