#!/usr/bin/env node
// Before `npm pack`/`npm publish`: the package's WIT world with its links resolved (wit/deps/*
// link into this repository, which a package cannot), into wit-packed/, which build.mjs reads
// when it is there.
import { cp, rm } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const sdk = resolve(dirname(fileURLToPath(import.meta.url)), '..');
await rm(join(sdk, 'wit-packed'), { recursive: true, force: true });
await cp(join(sdk, 'wit'), join(sdk, 'wit-packed'), { recursive: true, dereference: true });
