// In this repository the package name resolves to the TypeScript source through this file;
// `npm run build` publishes the compiled entry instead (scripts/build.ts).
export * from '../../../shared/relay/index.ts';
