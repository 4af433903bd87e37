import type { AppEnv } from '../server/api/http/env.js';
import type { Session } from './session.js';

/** The app's variables, plus what the dashboard's middleware sets for its pages. */
export type DashEnv = {
  Bindings: AppEnv['Bindings'];
  Variables: AppEnv['Variables'] & {
    /** The signed-in session (every page but sign-in has one). */
    session: Session;
    /** A POST's urlencoded fields, read once (bounded) by the CSRF check. */
    form: Record<string, string>;
  };
};
