export * from './accounts.js';
export * from './api-keys.js';
export * from './settings.js';
export * from './domain-keys.js';
export * from './domains.js';
