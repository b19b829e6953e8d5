// Stand-in for the host imports when the SDK runs under Node in unit tests.
export const logged = [];
export const config = new Map();
export function emit(level, message) {
  logged.push([level, message]);
}
export function get(key) {
  return config.has(key) ? config.get(key) : undefined;
}
