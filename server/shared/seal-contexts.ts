/**
 * The context each kind of stored secret is sealed under (server/shared/secrets.ts binds it into the ciphertext, so a
 * sealed value copied to another row or column opens nowhere). One table, so that what seals and what opens (and the
 * start's check of the secret key) never retype a string. Changing one leaves every stored value of that kind
 * unreadable.
 */
export const SEAL_CONTEXTS = {
  /** An account's DKIM private key for one domain. */
  dkimKey: (accountId: string, domain: string) => `dkim:${accountId}:${domain}`,
  /** A webhook endpoint's signing secret. */
  webhookSecret: (endpointId: string) => `webhook:${endpointId}`,
  /** An account's customer-database URL. */
  customerDbUrl: (accountId: string) => `customer-db:${accountId}`,
  /** A queued customer-database write's JSON content. */
  customerDbWrite: (writeId: string) => `customer-db-write:${writeId}`,
  /** A queued customer-database write's raw received message, sealed apart from its JSON. */
  customerDbWriteRaw: (writeId: string) => `customer-db-write-raw:${writeId}`,
  /** A message kept for the operator (postmaster@, abuse@). */
  operatorMessage: (messageId: string) => `operator-message:${messageId}`,
  /** A dashboard flash's secret (a new API key) waiting for the next page, on Postgres (dashboard/session.ts). */
  flashSecret: (sessionTokenHash: string) => `flash-secret:${sessionTokenHash}`,
  /** A captured message (DELIVERY_MODE=capture), per recipient. */
  captured: (emailId: string, recipient: string) => `captured:${emailId}:${recipient}`,
} as const;
