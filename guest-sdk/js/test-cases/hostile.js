// A test guest for the sandbox's limits: `spin` never returns (the epoch deadline must stop it),
// `mem_bomb` allocates until the memory cap stops it, `echo` answers normally (the next call must
// work after either).

const hoard = [];

export const tools = [
  {
    name: 'spin',
    description: 'Loops forever.',
    inputSchema: { type: 'object' },
    handler() {
      let n = 0;
      for (;;) n++;
    },
  },
  {
    name: 'memory_bomb',
    description: 'Allocates 1 MiB blocks until something stops it.',
    inputSchema: { type: 'object' },
    handler() {
      for (;;) hoard.push(new Uint8Array(1 << 20).fill(7));
    },
  },
  {
    name: 'echo',
    description: 'Returns its arguments.',
    inputSchema: { type: 'object' },
    annotations: { readOnly: true, idempotent: true },
    handler(args) {
      return JSON.stringify(args);
    },
  },
];
