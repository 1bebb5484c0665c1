// dynalite-guard runs dynalite's CLI unchanged but for one thing: a client
// that drops its connection in the middle of a request no longer ends the
// server. dynalite 4.0.0 (index.js, httpHandler) rethrows the request
// stream's 'aborted' error, which nothing catches, so any client whose
// request context was cancelled mid-call took the whole local stack down.
// Usage: node dynalite-guard.js <path to dynalite/cli.js> [dynalite flags]
'use strict'

process.on('uncaughtException', function (err) {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') {
    return // the client went away; its request has no one to answer
  }
  console.error((err && err.stack) || err)
  process.exit(1)
})

const cli = process.argv[2]
process.argv.splice(2, 1)
require(cli)
