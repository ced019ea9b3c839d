// The model forwarder inside a rollout container with no network (see qwen_swe/traffic/endpoint.py): listens on the
// container's own loopback and pipes every connection, byte for byte, to the session's Unix socket, so qwen-code
// keeps an ordinary http://127.0.0.1:PORT/v1 base URL. Run by the bundle's Node:
//     node forward.js SOCKET PORT_FILE      (writes the port it got to PORT_FILE once it listens)
"use strict";
const fs = require("fs");
const net = require("net");

const [socketPath, portFile] = process.argv.slice(2);
if (!socketPath || !portFile) {
  process.stderr.write("usage: node forward.js SOCKET PORT_FILE\n");
  process.exit(2);
}

const server = net.createServer((client) => {
  const upstream = net.connect(socketPath);
  const close = () => { client.destroy(); upstream.destroy(); };
  client.on("error", close);
  upstream.on("error", (err) => { process.stderr.write(`forward: ${socketPath}: ${err.message}\n`); close(); });
  client.on("close", close);
  upstream.on("close", close);
  client.pipe(upstream);
  upstream.pipe(client);
});

server.on("error", (err) => {
  process.stderr.write(`forward: cannot listen on 127.0.0.1: ${err.message}\n`);
  process.exit(1);
});

server.listen(0, "127.0.0.1", () => {
  // written whole, then renamed: a reader never sees half a port
  fs.writeFileSync(portFile + ".tmp", String(server.address().port));
  fs.renameSync(portFile + ".tmp", portFile);
});
