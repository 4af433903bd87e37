import { ApiError } from '../../server/errors.js';
import { isUuid } from '../../server/ids.js';

/** A keyset cursor from the query string (the last id of the page before): absent, or a UUID. */
export function afterParam(value: string | undefined): string | null {
  if (value === undefined || value === '') return null;
  if (!isUuid(value)) throw new ApiError('invalid_request', 'after: is not a row id of this list.');
  return value;
}
