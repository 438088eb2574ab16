// Prints one line per failed test of a vitest JSON report (file, test name, the first line of its
// error), so the end of CI's log, which is all a truncated log keeps, names what failed.
// Usage: node .ci/failed-tests.cjs <stage> <report.json>
const [stage, file] = process.argv.slice(2);
let report;
try {
  report = require(file);
} catch {
  console.log(`ci: ${stage}: no JSON report (${file}): the run ended before vitest wrote one`);
  process.exit(0);
}
const failed = [];
for (const suite of report.testResults ?? []) {
  const name = suite.name.replace(`${process.cwd()}/`, '');
  if (suite.status === 'failed' && (suite.assertionResults ?? []).every((t) => t.status !== 'failed')) {
    failed.push(
      `${name}: ${String(suite.message ?? 'the file failed to run')
        .split('\n')[0]
        .slice(0, 300)}`,
    );
  }
  for (const t of suite.assertionResults ?? []) {
    if (t.status !== 'failed') continue;
    const message = String(t.failureMessages?.[0] ?? '')
      .split('\n')[0]
      .slice(0, 300);
    failed.push(`${name} > ${t.fullName}: ${message}`);
  }
}
console.log(`ci: ${stage}: ${report.numPassedTests} passed, ${report.numFailedTests} failed`);
for (const line of failed) console.log(`ci: ${stage}: FAILED ${line}`);
