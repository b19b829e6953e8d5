// Edit before approve: a form generated from a tool's JSON Schema (a JSON editor when the schema
// is not a flat object), validation against the schema before anything is sent, and the diff of
// what changed. Pure functions but `editor`, which builds the form.

import { el, pretty, uid } from './dom.js';

function typeOf(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (Number.isInteger(value)) return 'integer';
  return typeof value;
}

function fits(type, value) {
  const actual = typeOf(value);
  return type === actual || (type === 'number' && actual === 'integer');
}

/** Where `value` fails `schema` (the common JSON Schema keywords), as `["/path: what", …]`. */
export function validate(schema, value, path = '') {
  if (!schema || typeof schema !== 'object' || schema === true) return [];
  const at = path || '/';
  const errors = [];
  const types = schema.type === undefined ? null : [].concat(schema.type);
  if (types && !types.some((t) => fits(t, value))) {
    return [`${at}: must be ${types.join(' or ')}, not ${typeOf(value)}`];
  }
  if (schema.enum && !schema.enum.some((v) => JSON.stringify(v) === JSON.stringify(value))) {
    errors.push(`${at}: must be one of ${schema.enum.map((v) => JSON.stringify(v)).join(', ')}`);
  }
  if ('const' in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) {
    errors.push(`${at}: must be ${JSON.stringify(schema.const)}`);
  }
  if (typeof value === 'number') {
    if (typeof schema.minimum === 'number' && value < schema.minimum) errors.push(`${at}: must be at least ${schema.minimum}`);
    if (typeof schema.maximum === 'number' && value > schema.maximum) errors.push(`${at}: must be at most ${schema.maximum}`);
    if (typeof schema.exclusiveMinimum === 'number' && value <= schema.exclusiveMinimum) errors.push(`${at}: must be more than ${schema.exclusiveMinimum}`);
    if (typeof schema.exclusiveMaximum === 'number' && value >= schema.exclusiveMaximum) errors.push(`${at}: must be less than ${schema.exclusiveMaximum}`);
  }
  if (typeof value === 'string') {
    const length = [...value].length;
    if (typeof schema.minLength === 'number' && length < schema.minLength) errors.push(`${at}: must have at least ${schema.minLength} characters`);
    if (typeof schema.maxLength === 'number' && length > schema.maxLength) errors.push(`${at}: must have at most ${schema.maxLength} characters`);
    if (typeof schema.pattern === 'string') {
      let re = null;
      try { re = new RegExp(schema.pattern, 'u'); } catch { re = null; }
      if (re && !re.test(value)) errors.push(`${at}: must match ${schema.pattern}`);
    }
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === 'number' && value.length < schema.minItems) errors.push(`${at}: must have at least ${schema.minItems} items`);
    if (typeof schema.maxItems === 'number' && value.length > schema.maxItems) errors.push(`${at}: must have at most ${schema.maxItems} items`);
    if (schema.items && typeof schema.items === 'object') {
      value.forEach((item, i) => errors.push(...validate(schema.items, item, `${path}/${i}`)));
    }
  }
  if (typeOf(value) === 'object') {
    const properties = schema.properties || {};
    for (const name of schema.required || []) {
      if (!(name in value)) errors.push(`${path}/${name}: is required`);
    }
    for (const [name, item] of Object.entries(value)) {
      if (name in properties) errors.push(...validate(properties[name], item, `${path}/${name}`));
      else if (schema.additionalProperties === false) errors.push(`${path}/${name}: is not a field of this tool`);
      else if (schema.additionalProperties && typeof schema.additionalProperties === 'object') {
        errors.push(...validate(schema.additionalProperties, item, `${path}/${name}`));
      }
    }
  }
  return errors;
}

/** What changed from `before` to `after`: `[{path, op: 'changed'|'added'|'removed', from, to}]`. */
export function diff(before, after, path = '') {
  const kind = (v) => (typeOf(v) === 'object' ? 'object' : 'other');
  if (kind(before) === 'object' && kind(after) === 'object') {
    const out = [];
    const names = [...new Set([...Object.keys(before), ...Object.keys(after)])];
    for (const name of names) {
      const p = `${path}/${name}`;
      if (!(name in after)) out.push({ path: p, op: 'removed', from: before[name] });
      else if (!(name in before)) out.push({ path: p, op: 'added', to: after[name] });
      else out.push(...diff(before[name], after[name], p));
    }
    return out;
  }
  return JSON.stringify(before) === JSON.stringify(after) ? [] : [{ path: path || '/', op: 'changed', from: before, to: after }];
}

/** The diff as one line per change. */
export function describe(change) {
  const show = (v) => JSON.stringify(v);
  if (change.op === 'removed') return `− ${change.path}: ${show(change.from)}`;
  if (change.op === 'added') return `+ ${change.path}: ${show(change.to)}`;
  return `${change.path}: ${show(change.from)} → ${show(change.to)}`;
}

function simple(schema) {
  if (!schema) return false;
  if (Array.isArray(schema.enum)) return schema.enum.every((v) => v === null || typeof v !== 'object');
  return ['string', 'integer', 'number', 'boolean'].includes(schema.type);
}

/** Whether the form can be generated (a flat object of simple fields), else a JSON editor. */
export function formable(schema) {
  return Boolean(schema && schema.type === 'object' && schema.properties
    && Object.values(schema.properties).every(simple));
}

/**
 * The editor of `args` under `schema`: `{node, value()}`; `value()` returns `{input}` or
 * `{problem}` (text that cannot be read as the field's type). `onChange` runs on every edit.
 */
export function editor(schema, args, onChange) {
  if (!formable(schema)) {
    const id = uid('json');
    const area = el('textarea', { id, rows: 8, class: 'json', spellcheck: 'false', 'aria-describedby': `${id}-hint` });
    area.value = pretty(args);
    area.addEventListener('input', onChange);
    const node = el('div', { class: 'field' },
      el('label', { for: id, text: 'Arguments (JSON)' }),
      el('span', { class: 'hint', id: `${id}-hint`, text: schema ? 'Checked against the tool\u2019s input schema before it is sent.' : 'This tool has no input schema: any JSON object.' }),
      area);
    return {
      node,
      value() {
        try { return { input: JSON.parse(area.value) }; } catch (error) { return { problem: `not JSON: ${error.message}` }; }
      },
    };
  }
  const required = new Set(schema.required || []);
  const fields = [];
  const node = el('div', { class: 'fields' });
  for (const [name, field] of Object.entries(schema.properties)) {
    const id = uid(`field-${name.replace(/[^A-Za-z0-9_-]/g, '_')}`);
    const present = name in args;
    const current = args[name];
    let input;
    if (Array.isArray(field.enum)) {
      input = el('select', { id, name });
      if (!required.has(name)) input.append(el('option', { value: '', text: '(not set)' }));
      for (const option of field.enum) input.append(el('option', { value: JSON.stringify(option), text: String(option) }));
      input.value = present ? JSON.stringify(current) : '';
    } else if (field.type === 'boolean') {
      input = el('input', { id, name, type: 'checkbox' });
      input.checked = current === true;
    } else if (field.type === 'integer' || field.type === 'number') {
      input = el('input', { id, name, type: 'number', inputmode: 'decimal', step: field.type === 'integer' ? '1' : 'any' });
      if (typeof field.minimum === 'number') input.min = String(field.minimum);
      if (typeof field.maximum === 'number') input.max = String(field.maximum);
      input.value = present ? String(current) : '';
    } else {
      input = el('input', { id, name, type: 'text' });
      input.value = present ? String(current) : '';
    }
    input.addEventListener('input', onChange);
    input.addEventListener('change', onChange);
    const hintText = [field.type, required.has(name) ? 'required' : 'optional', field.description].filter(Boolean).join(' · ');
    input.setAttribute('aria-describedby', `${id}-hint`);
    node.append(el('div', { class: 'field' },
      el('label', { for: id, text: name }),
      el('span', { class: 'hint', id: `${id}-hint`, text: hintText }),
      input));
    fields.push({ name, field, input, present });
  }
  return {
    node,
    value() {
      const input = {};
      for (const { name, field, input: control, present } of fields) {
        if (Array.isArray(field.enum)) {
          if (control.value !== '') input[name] = JSON.parse(control.value);
        } else if (field.type === 'boolean') {
          if (control.checked || present) input[name] = control.checked;
        } else if (field.type === 'integer' || field.type === 'number') {
          const text = control.value.trim();
          if (text === '') continue;
          const number = Number(text);
          if (!Number.isFinite(number)) return { problem: `/${name}: ${JSON.stringify(text)} is not a number` };
          input[name] = number;
        } else if (control.value !== '' || present) {
          input[name] = control.value;
        }
      }
      // Fields the schema does not list are kept as they were.
      for (const [name, value] of Object.entries(args)) {
        if (!(name in schema.properties)) input[name] = value;
      }
      return { input };
    },
  };
}
