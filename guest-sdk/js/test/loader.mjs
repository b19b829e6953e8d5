// Node module hooks for the unit tests: 'tollgate:guest/host' (the host shim the build picks per
// engine) resolves to host-stub.mjs.
export async function resolve(specifier, context, next) {
  if (specifier === 'tollgate:guest/host') {
    return { url: new URL('./host-stub.mjs', import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
