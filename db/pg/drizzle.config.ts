import { defineConfig } from 'drizzle-kit';

/** The Postgres schema's migrations (db/pg/README.md): `npm run db:generate:pg` after a change in db/pg/schema/. */
export default defineConfig({
  dialect: 'postgresql',
  schema: './db/pg/schema/index.ts',
  out: './db/pg/migrations',
});
