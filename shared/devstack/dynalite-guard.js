// dynalite-guard runs dynalite's CLI unchanged but for two things.
//
// 1. A client that drops its connection in the middle of a request no longer
//    ends the server. dynalite 4.0.0 (index.js, httpHandler) rethrows the
//    request stream's 'aborted' error, which nothing catches, so any client
//    whose request context was cancelled mid-call took the whole local stack
//    down.
// 2. An expression it has parsed is not parsed again. dynalite parses every
//    request's expressions with PEG parsers that resolve the #names and
//    :values as they go; profiled under the test suite, that parsing was
//    about half of dynalite's CPU, and 70% of the parses repeated one
//    already made with the very same text, names and values (a pass reads
//    the same index, a poll the same item). A parse is a pure function of
//    those three, but for the names and values it marks used (dynalite
//    refuses a request that leaves one unused): the cache keys on all
//    three, records which names and values the expression uses and marks
//    them again on every hit, and hands out a copy of the tree, so nothing dynalite does to one answer
//    reaches another. A parse that throws (a malformed expression) is not
//    kept: it is made again each time, with its own error.
//
// Usage: node dynalite-guard.js <path to dynalite/cli.js> [dynalite flags]
'use strict'

const path = require('path')

process.on('uncaughtException', function (err) {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') {
    return // the client went away; its request has no one to answer
  }
  console.error((err && err.stack) || err)
  process.exit(1)
})

const cli = process.argv[2]
process.argv.splice(2, 1)

// Entries kept before the cache starts over: a few thousand distinct
// expressions cover a test package or a local stack's working set.
const maxEntries = 20000

for (const name of ['conditionParser', 'updateParser', 'projectionParser']) {
  const parser = require(path.join(path.dirname(cli), 'db', name))
  const parse = parser.parse
  const cache = new Map()
  parser.parse = function (str, options) {
    const context = options.context
    const key = str + '\0' + JSON.stringify(context.attrNames || null) + '\0' + JSON.stringify(context.attrVals || null)
    const hit = cache.get(key)
    if (hit) {
      markUsed(context, hit)
      return structuredClone(hit.tree)
    }
    // Parsed against every name and value unused, the parse says which
    // this expression uses, whatever another expression of the request
    // marked before it.
    const all = {
      unusedAttrNames: Object.fromEntries(Object.keys(context.attrNames || {}).map(k => [k, true])),
      unusedAttrVals: Object.fromEntries(Object.keys(context.attrVals || {}).map(k => [k, true])),
    }
    const own = Object.assign({}, context, all)
    const tree = parse.call(this, str, Object.assign({}, options, { context: own })) // throws for a malformed expression: not kept
    const entry = {
      usedNames: Object.keys(context.attrNames || {}).filter(k => !(k in own.unusedAttrNames)),
      usedVals: Object.keys(context.attrVals || {}).filter(k => !(k in own.unusedAttrVals)),
    }
    markUsed(context, entry)
    try {
      entry.tree = structuredClone(tree)
    } catch (e) {
      return tree // a tree that cannot be copied is not kept
    }
    if (cache.size >= maxEntries) cache.clear()
    cache.set(key, entry)
    return tree
  }
}

function markUsed (context, entry) {
  for (const k of entry.usedNames) delete context.unusedAttrNames[k]
  for (const k of entry.usedVals) delete context.unusedAttrVals[k]
}

require(cli)
