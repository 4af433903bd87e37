import { eq } from 'drizzle-orm';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accounts } from '../db/schema/index.js';
import { launchBrowser, newPage, signIn } from './helpers/browser.js';
import { adminTokenFor } from './helpers/dashboard.js';
import { seedEndpoint } from './helpers/outcomes.js';
import { type TestService, startService } from './helpers/service.js';

/**
 * A tenant's name is drawn isolated (`<bdi>`) where the dashboard's own words follow it on a line: a name holding a
 * bidi override (the API refuses one now, tests/input-text.test.ts, but a database may hold one from before) must not
 * reverse the service's explanation drawn after it.
 */

let service: TestService;
let browser: Browser;
let token: string;

beforeAll(async () => {
  service = await startService();
  token = adminTokenFor(service);
  browser = await launchBrowser();
});
afterAll(async () => {
  await browser?.close();
  await service?.close();
});

describe('a name holding a bidi override', () => {
  it("does not reverse the overview's explanation that follows it", async () => {
    const { key } = service.newAccount({ name: 'Parent Co' });
    const sub = await service.api('POST', '/accounts', { key, body: { name: 'Acme Shop' } });
    expect(sub.status, JSON.stringify(sub.body)).toBe(201);
    service.deps.db.update(accounts).set({ name: 'Acme Shop\u202e' }).where(eq(accounts.id, sub.body.id)).run();
    seedEndpoint(service, sub.body.id, ['email.delivered'], { active: false });
    const page = await newPage(browser);
    try {
      await signIn(page, service.url, token);
      const why = page.locator('#webhooks .why', { hasText: 'Switched off' });
      expect(await why.count()).toBe(1);
      // Where the words "Switched" and "off" are drawn: in reading order, "Switched" is left of "off".
      // Run in the page (the tests are compiled without the DOM's types, hence `any`).
      const x = (await why.evaluate((el: any) => {
        const doc = (globalThis as any).document;
        const walker = doc.createTreeWalker(el, 4 /* NodeFilter.SHOW_TEXT */);
        let node: any;
        while ((node = walker.nextNode()) && !node.textContent.includes('Switched off'));
        const at = (word: string) => {
          const r = doc.createRange();
          const i = node.textContent.indexOf(word);
          r.setStart(node, i);
          r.setEnd(node, i + word.length);
          return r.getBoundingClientRect().left as number;
        };
        return { switched: at('Switched'), off: at(' off ') };
      })) as { switched: number; off: number };
      expect(x.switched, 'the words after the name are drawn right-to-left (reversed)').toBeLessThan(x.off);
    } finally {
      await page.context().close();
    }
  });
});
