// Fails fast, in words, on a Node.js too old for this project (plain CommonJS so that any Node runs it).
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 18)) {
  console.error(
    `outbox-relay-aws needs Node.js 22.18 or later (24 recommended; Lambda runs nodejs24.x). This is ${process.version}.\n` +
      'Install it with nvm, or: npm install --prefix ~/.node24 node@24 && export PATH=~/.node24/node_modules/.bin:$PATH',
  );
  process.exit(1);
}
