// A Node.js HTTP server on port 3000 whose answer is a counter held in memory; it also
// publishes its state like the Python workloads (state.py).
const fs = require("fs");
const http = require("http");
const crypto = require("crypto");

const boot = crypto.randomBytes(8).toString("hex");
let count = 0;
function publish() {
  fs.writeFileSync("/tmp/node_server.state.tmp",
    JSON.stringify({ boot, count, pid: process.pid }));
  fs.renameSync("/tmp/node_server.state.tmp", "/tmp/node_server.state");
}
setInterval(() => { count += 1; publish(); }, 50);
http.createServer((req, res) => {
  count += 1;
  res.end(`${boot} ${count}\n`);
}).listen(3000, "0.0.0.0");
