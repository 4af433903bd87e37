/** An own template's name (docs/api/decisions.md section 9): 1 to 64 of a-z, 0-9 and `-`, starting with a letter or a digit. */
export const TEMPLATE_NAME = /^[a-z0-9][a-z0-9-]{0,63}$/;
