import { build } from 'esbuild';
const [entry, ...ext] = process.argv.slice(2);
const r = await build({ entryPoints: [entry], bundle: true, platform: 'node', format: 'esm', write: false, minify: true, keepNames: true, external: ext, logLevel: 'error', target: 'node24', mainFields: ['module','main'] });
console.log(entry, ext.join(','), (r.outputFiles[0].contents.length/1024).toFixed(0), 'KiB');
