/** Every error code of docs/api/contract.md, and the only ones the API answers with (plus the one marked as outside it). */
export const ERROR_STATUS = {
  invalid_json: 400,
  invalid_idempotency_key: 400,
  invalid_key: 401,
  no_credits: 402,
  insufficient_scope: 403,
  suspended: 403,
  domain_not_yours: 403,
  domain_not_ready: 403,
  account_not_found: 404,
  not_found: 404,
  email_not_found: 404,
  webhook_not_found: 404,
  database_not_connected: 404,
  /** docs/api/decisions.md section 9 (own templates), beyond docs/api/contract.md's table, as are the four below. */
  template_not_found: 404,
  idempotency_in_progress: 409,
  domain_exists: 409,
  domain_unavailable: 409,
  domain_limit: 409,
  domain_in_use: 409,
  conflict: 409,
  limit_reached: 409,
  template_exists: 409,
  template_limit: 409,
  template_in_use: 409,
  body_too_large: 413,
  invalid_request: 422,
  invalid_cursor: 422,
  recipient_suppressed: 422,
  idempotency_mismatch: 422,
  invalid_url: 422,
  too_many_endpoints: 422,
  blocked_host: 422,
  database_unreachable: 422,
  invalid_template: 422,
  rate_limited: 429,
  quota_exceeded: 429,
  sandbox_limit: 429,
  ping_cooldown: 429,
  internal_error: 500,
  send_failed: 502,
  not_configured: 503,
  /**
   * Decided in docs/api/decisions.md section 13, not (yet) in docs/api/contract.md's table: the service's storage failed (a full disk), so
   * the request could not be recorded; the message names the cause. Never `send_failed`, which says the mail server
   * refused the message.
   */
  unavailable: 503,
  /**
   * Outside docs/api/contract.md's table, which has no code for it: a known path asked with a method it does not serve (with an
   * `Allow` header listing the ones it does).
   */
  method_not_allowed: 405,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;
export type ErrorStatus = (typeof ERROR_STATUS)[ErrorCode] | 400 | 422;

/** The one error type of the service. `status` defaults to the code's usual status; a few lists override it. */
export class ApiError extends Error {
  override name = 'ApiError';
  readonly status: number;
  readonly headers: Record<string, string>;

  constructor(
    readonly code: ErrorCode,
    message: string,
    options: { status?: number; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.status = options.status ?? ERROR_STATUS[code];
    this.headers = options.headers ?? {};
  }

  toBody(): { error: { code: ErrorCode; message: string } } {
    return { error: { code: this.code, message: this.message } };
  }
}

export const notFound = (what: string) => new ApiError('not_found', `No ${what} with that id on this account.`);
