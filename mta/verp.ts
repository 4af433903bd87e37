/**
 * The envelope sender of every outbound transaction: a VERP address on MAIL_HOSTNAME that names the email and the
 * recipient's position in its `to` list, so an asynchronous bounce or complaint can be tied to the right recipient.
 */
export function verpAddress(emailId: string, recipientIndex: number, mailHostname: string): string {
  return `bounce+${emailId.replace(/-/g, '')}.${recipientIndex}@${mailHostname}`;
}

/** The email id and recipient index a VERP address names, or null. */
export function parseVerp(address: string, mailHostname: string): { emailId: string; recipientIndex: number } | null {
  const m = /^bounce\+([0-9a-f]{32})\.(\d{1,2})@(.+)$/i.exec(address.trim());
  if (!m || m[3]!.toLowerCase() !== mailHostname.toLowerCase()) return null;
  const h = m[1]!.toLowerCase();
  return { emailId: `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`, recipientIndex: Number(m[2]) };
}
