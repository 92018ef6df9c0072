// index.d.ts declares what the code has: the same exports, and for each
// class the same public methods (test/types_check.ts, compiled by
// `npm run typecheck`, checks the declarations against a program).

import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import * as sqlq from "../index.js";
import * as testing from "../testing.js";

const dts = fs.readFileSync(new URL("../index.d.ts", import.meta.url), "utf8");

const declaredIn = (text) =>
  [...text.matchAll(/^export (?:class|function) (\w+)/gm)].map((m) => m[1]).sort();

test("every export is declared, every declared value exported", () => {
  assert.deepEqual(Object.keys(sqlq).sort(), declaredIn(dts));
  const testingDts = fs.readFileSync(new URL("../testing.d.ts", import.meta.url), "utf8");
  assert.deepEqual(Object.keys(testing).sort(), declaredIn(testingDts), "sqlq/testing");
});

test("each class declares exactly the methods it has", () => {
  for (const [, name, body] of dts.matchAll(/^export class (\w+)[^{]*\{([\s\S]*?)^\}/gm)) {
    // An overloaded method is declared once per signature.
    const declared = [...new Set([...body.matchAll(/^ {2}(\w+)\(/gm)].map((m) => m[1]))]
      .filter((k) => k !== "constructor").sort();
    const proto = sqlq[name].prototype;
    const actual = Object.getOwnPropertyNames(proto)
      .filter((k) => k !== "constructor" && !k.startsWith("_") &&
                     typeof Object.getOwnPropertyDescriptor(proto, k).value === "function")
      .sort();
    assert.deepEqual(actual, declared, `methods of ${name}`);
  }
});
