// Writes mcp_tools.json: the tools/list answers of MCP servers over stdio (JSON-RPC 2.0).
// Made with @modelcontextprotocol/server-everything, -filesystem, -memory and
// -sequential-thinking 2026.8.31 from the npm registry (installed beside this file);
// `node list_mcp_tools.js > mcp_tools.json`, then each tool kept as {name, description, inputSchema}.
const { spawn } = require("child_process");
const path = require("path");
async function list(args) {
  return new Promise((resolve, reject) => {
    const child = spawn("node", args, { stdio: ["pipe", "pipe", "ignore"] });
    let buffer = "";
    const timer = setTimeout(() => { child.kill(); reject(new Error("timeout " + args)); }, 20000);
    child.stdout.on("data", (data) => {
      buffer += data;
      let i;
      while ((i = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, i); buffer = buffer.slice(i + 1);
        const msg = JSON.parse(line);
        if (msg.id === 1) {
          child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n");
          child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list" }) + "\n");
        } else if (msg.id === 2) {
          clearTimeout(timer); child.kill(); resolve(msg.result.tools);
        }
      }
    });
    child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: {
      protocolVersion: "2024-11-05", capabilities: {}, clientInfo: { name: "list", version: "1" } } }) + "\n");
  });
}
(async () => {
  const nm = path.join(__dirname, "node_modules", "@modelcontextprotocol");
  const servers = {
    "server-everything": [path.join(nm, "server-everything/dist/index.js"), "stdio"],
    "server-filesystem": [path.join(nm, "server-filesystem/dist/index.js"), "/tmp"],
    "server-memory": [path.join(nm, "server-memory/dist/index.js")],
    "server-sequential-thinking": [path.join(nm, "server-sequential-thinking/dist/index.js")],
  };
  const out = {};
  for (const [name, args] of Object.entries(servers)) {
    try { out[name] = await list(args); } catch (e) { console.error(name, e.message); }
  }
  console.log(JSON.stringify(out, null, 1));
})();
