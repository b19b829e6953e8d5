// The `{{name}}` tool. Build it into ../../tools/ with `tollgate build` in the agent's folder;
// try it with `tollgate tools call . {{name}} '{"text": "world"}'`.

export const tools = [
  {
    name: '{{name}}',
    description: 'Greets: answers with the text it was given.',
    inputSchema: {
      type: 'object',
      properties: { text: { type: 'string', description: 'Who or what to greet.' } },
      required: ['text'],
      additionalProperties: false,
    },
    annotations: { readOnly: true, idempotent: true },
    handler({ text }) {
      return `hello, ${text}`;
    },
  },
];
