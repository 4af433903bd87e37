export * from './accounts.js';
export * from './api-keys.js';
export * from './settings.js';
