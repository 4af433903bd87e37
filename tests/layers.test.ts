import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { LAYERS, layerOf, productSources, ruleBroken, specifiersOf, violationsIn } from './helpers/layers.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

describe('the layers (docs/design/layers.md)', () => {
  it('no module imports against the direction', () => {
    const violations = violationsIn(productSources(ROOT));
    expect(violations.map((v) => `${v.file} -> ${v.imports}: ${v.why}`)).toEqual([]);
  });

  it('every product folder belongs to a layer', () => {
    const outside = productSources(ROOT)
      .filter((f) => layerOf(f.path) === null)
      .map((f) => f.path);
    expect(outside).toEqual([]);
  });

  it.each([
    ['db/client.ts', 'server/shared/logger.ts', true],
    ['db/client.ts', 'db/prepared.ts', false],
    ['server/shared/config.ts', 'db/client.ts', true],
    ['server/shared/config.ts', 'server/shared/ids.ts', false],
    ['server/core/sending.ts', 'server/api/http/body.ts', true],
    ['server/core/sending.ts', 'mta/verp.ts', true],
    ['server/core/sending.ts', 'server/queues/poll-loop.ts', true],
    ['server/core/sending.ts', 'db/client.ts', false],
    ['server/core/sending.ts', 'server/shared/clock.ts', false],
    ['server/queues/run.ts', 'server/core/outcomes.ts', false],
    ['mta/delivery-engine.ts', 'server/webhooks/dispatcher.ts', true],
    ['server/customer-db/writer.ts', 'mta/inbound/receive.ts', true],
    ['mta/delivery-engine.ts', 'server/queues/poll-loop.ts', false],
    ['server/api/routes/emails.ts', 'dashboard/app.tsx', true],
    ['dashboard/app.tsx', 'server/api/http/body.ts', false],
    ['dashboard/app.tsx', 'server/app/deps.ts', true],
    ['server/app/main.ts', 'mta/delivery-engine.ts', false],
    ['server/webhooks/dispatcher.ts', 'server/nowhere.ts', true],
  ] as const)('%s importing %s breaks the rule: %s', (from, to, broken) => {
    expect(ruleBroken(from, to) !== null).toBe(broken);
  });

  it('reads static, type-only, re-exported and dynamic imports', () => {
    const source = [
      "import { a } from '../api/http/body.js';",
      "import type { B } from '../app/deps.js';",
      "export { c } from './c.js';",
      "const d = await import('../../dashboard/app.js');",
      "import { readFileSync } from 'node:fs';",
    ].join('\n');
    expect(specifiersOf(source)).toEqual(['../api/http/body.js', '../app/deps.js', './c.js', '../../dashboard/app.js']);
    const found = violationsIn([{ path: 'server/core/x.ts', source }]);
    expect(found.map((v) => v.imports)).toEqual(['../api/http/body.js', '../app/deps.js', '../../dashboard/app.js']);
  });

  it('names each layer once', () => {
    expect(new Set(LAYERS.map((l) => l.folder)).size).toBe(LAYERS.length);
  });
});
