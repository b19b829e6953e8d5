// The `{{name}}` tool. Build it into ../../tools/ with `tollgate build` in the agent's folder;
// try it with `tollgate tools call . {{name}} '{"text": "world"}'`.

/**
 * The arguments: the build derives their JSON Schema from this type.
 * @typedef {object} Args
 * @property {string} text Who or what to greet.
 */

export const tools = [
  {
    name: '{{name}}',
    description: 'Greets: answers with the text it was given.',
    annotations: { readOnly: true, idempotent: true },
    /** @param {Args} args */
    handler({ text }) {
      return `hello, ${text}`;
    },
  },
];
