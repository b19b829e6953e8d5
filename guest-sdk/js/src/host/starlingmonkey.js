// The host imports as componentize-js (StarlingMonkey) exposes them: named exports.
export { emit } from 'tollgate:tool/log@0.1.0';
export { get } from 'tollgate:tool/config@0.1.0';
