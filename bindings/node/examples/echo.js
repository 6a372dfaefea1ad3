// A Homa server and client in one process: the README's example.
const homa = require('homa');

async function main() {
  const server = await homa.open({ port: 4000, host: 'localhost' });
  const serving = server.serve((req) => req.message);
  const client = await homa.open({ host: 'localhost' });

  const reply = await client.call('localhost:4000', Buffer.from('ping'), { timeoutMs: 1000 });
  console.log(reply.toString()); // ping
  client.close();
  server.close();
  await serving;
}

main();
