// Input schemas derived from JSDoc types, at build time: a tool in `export const tools = [...]`
// that gives no `inputSchema` gets the JSON Schema of its handler's first parameter, whose type
// comes from JSDoc (`@param {OrderArgs} args` with an `@typedef`, or an inline object type), read
// by the TypeScript compiler (its JavaScript checker, as an editor reads it).
//
//   /** @typedef {{ order_id: string, amount_cents?: number, reason: 'damaged' | 'late' }} Args */
//   export const tools = [{ name: 'refund', description: '...', /** @param {Args} args */ handler(args) {...} }];
//
// Types: string, number, boolean, string and number literals (and unions of them: `enum`),
// arrays, `Record<string, T>`, object types (an optional property is not required; no others are
// allowed) and unions with `undefined` or `null` (optional). A property's JSDoc text (`@property
// {string} order_id The order.`, or a comment on a type literal's member) is its `description`.
// JavaScript has one `number`, so an integer, a bound or a format needs `inputSchema` written by
// hand. Any other type is an error naming the tool and the property.

import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

// The compiler's JavaScript API (TypeScript 6: its successor is a native binary without one).
function typescript() {
  try {
    return require('typescript-compiler-api');
  } catch {
    throw new Error('the TypeScript compiler API (typescript-compiler-api) is not installed: run scripts/install-guest-toolchains.sh, or npm install @tollgate/guest');
  }
}

/**
 * The derived input schema of each tool of `source` that gives none, by tool name.
 * @param {string} source an absolute path
 * @returns {Record<string, object>}
 */
export function derivedSchemas(source) {
  const ts = typescript();
  const program = ts.createProgram([source], {
    allowJs: true,
    checkJs: true,
    noEmit: true,
    strict: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
  });
  const checker = program.getTypeChecker();
  const file = program.getSourceFile(source);
  if (!file) throw new Error(`${source}: not readable`);
  const schemas = {};
  for (const object of toolObjects(ts, file)) {
    const props = new Map(object.properties.filter((p) => p.name).map((p) => [p.name.getText(file), p]));
    if (props.has('inputSchema')) continue;
    const nameProp = props.get('name');
    const name = nameProp && ts.isPropertyAssignment(nameProp) && ts.isStringLiteralLike(nameProp.initializer)
      ? nameProp.initializer.text
      : undefined;
    if (!name) continue; // the runtime refuses a tool without a name, with its own message
    const handler = props.get('handler');
    const fn = handler && (ts.isMethodDeclaration(handler) ? handler
      : ts.isPropertyAssignment(handler) && (ts.isFunctionExpression(handler.initializer) || ts.isArrowFunction(handler.initializer)) ? handler.initializer
      : undefined);
    const param = fn?.parameters[0];
    if (!param || !ts.getJSDocType(param)) {
      throw new Error(`tool ${name}: give inputSchema, or a JSDoc type for its handler's first parameter (@param {Args} args)`);
    }
    schemas[name] = schemaOf(ts, checker, checker.getTypeAtLocation(param), name, new Set());
  }
  return schemas;
}

// The object literals of `export const tools = [...]`.
function toolObjects(ts, file) {
  const found = [];
  for (const statement of file.statements) {
    if (!ts.isVariableStatement(statement)) continue;
    if (!statement.modifiers?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword)) continue;
    for (const decl of statement.declarationList.declarations) {
      if (decl.name.getText(file) !== 'tools' || !decl.initializer || !ts.isArrayLiteralExpression(decl.initializer)) continue;
      for (const element of decl.initializer.elements) {
        if (ts.isObjectLiteralExpression(element)) found.push(element);
      }
    }
  }
  return found;
}

function schemaOf(ts, checker, type, where, seen) {
  const F = ts.TypeFlags;
  if (type.flags & F.Union) {
    const kept = type.types.filter((t) => !(t.flags & (F.Undefined | F.Null)));
    if (kept.length === 1) return schemaOf(ts, checker, kept[0], where, seen);
    if (kept.every((t) => t.flags & (F.StringLiteral | F.NumberLiteral))) return { enum: kept.map((t) => t.value) };
    if (kept.every((t) => t.flags & F.BooleanLiteral)) return { type: 'boolean' };
    return { anyOf: kept.map((t) => schemaOf(ts, checker, t, where, seen)) };
  }
  if (type.flags & F.StringLiteral || type.flags & F.NumberLiteral) return { enum: [type.value] };
  if (type.flags & F.String) return { type: 'string' };
  if (type.flags & F.Number) return { type: 'number' };
  if (type.flags & (F.Boolean | F.BooleanLiteral)) return { type: 'boolean' };
  if (checker.isArrayType(type)) {
    const [item] = checker.getTypeArguments(type);
    return { type: 'array', items: schemaOf(ts, checker, item, `${where}[]`, seen) };
  }
  if (type.flags & F.Object) {
    if (seen.has(type)) throw new Error(`${where}: a recursive type has no JSON Schema here; give inputSchema`);
    const index = checker.getIndexInfoOfType(type, ts.IndexKind.String);
    const properties = checker.getPropertiesOfType(type);
    if (properties.some((p) => p.valueDeclaration && !ts.isPropertySignature(p.valueDeclaration) && !ts.isPropertyAssignment(p.valueDeclaration) && !ts.isJSDocPropertyTag(p.valueDeclaration))) {
      throw new Error(`${where}: ${checker.typeToString(type)} is not a plain object type; give inputSchema`);
    }
    const inner = new Set(seen).add(type);
    if (index && properties.length === 0) {
      return { type: 'object', additionalProperties: schemaOf(ts, checker, index.type, `${where}{}`, inner) };
    }
    const schema = { type: 'object', properties: {}, required: [], additionalProperties: false };
    for (const property of properties) {
      const at = `${where}.${property.name}`;
      const declared = property.valueDeclaration;
      const propType = declared ? checker.getTypeOfSymbolAtLocation(property, declared) : checker.getTypeOfSymbol(property);
      const value = schemaOf(ts, checker, propType, at, inner);
      const text = ts.displayPartsToString(property.getDocumentationComment(checker)).trim();
      if (text) value.description = text;
      schema.properties[property.name] = value;
      if (!(property.flags & ts.SymbolFlags.Optional)) schema.required.push(property.name);
    }
    return schema;
  }
  throw new Error(`${where}: no JSON Schema for ${checker.typeToString(type)}; give inputSchema, or use string, number, boolean, literals, arrays, Record<string, T> or object types`);
}
