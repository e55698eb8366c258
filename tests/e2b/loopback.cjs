// node --require ./loopback.cjs: what a machine set up as docs/e2b.md says gives the SDK,
// without touching the machine. Every name below .localhost resolves to 127.0.0.1 (as
// libnss-myhostname makes the system resolver do), and with SANDBOXER_TLS_PORT set, TLS
// connections to such a name on port 443 go to that port instead (Caddy on an unprivileged
// port in the tests). The SDK itself is not touched: it builds its URLs as it always does.
const dns = require('node:dns')
const tls = require('node:tls')

const local = host => typeof host === 'string' &&
  (host === 'localhost' || host.endsWith('.localhost'))

const lookup = dns.lookup
dns.lookup = function (host, opts, cb) {
  if (typeof opts === 'function') { cb = opts; opts = {} }
  if (!local(host)) return lookup.call(this, host, opts, cb)
  const all = typeof opts === 'object' && opts && opts.all
  process.nextTick(() => all ? cb(null, [{ address: '127.0.0.1', family: 4 }])
    : cb(null, '127.0.0.1', 4))
}

const port = Number(process.env.SANDBOXER_TLS_PORT || 0)
const connect = tls.connect
tls.connect = function (...args) {
  const o = args[0]
  if (port && o && typeof o === 'object' && local(o.host || o.servername) &&
      Number(o.port || 443) === 443) {
    args[0] = { ...o, port }
  }
  return connect.apply(this, args)
}
