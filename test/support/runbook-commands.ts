/**
 * The `aws …` commands a page of the docs gives, and what each names of the deployment, so that a
 * synth test can check them against the template (test/infra/infra.test.ts, "the runbooks' aws
 * commands"): a runbook whose command names a log group the construct never made sends the
 * engineer paged at night to the wrong place.
 */

/** One `aws …` command as a docs page writes it. */
export interface DocsAwsCommand {
  /** The command on one line (continuations and line breaks of an inline code span joined). */
  text: string;
  /** `aws <service> <operation>`. */
  service: string;
  operation: string;
  /** Each argument that names a resource of the deployment: the option (or `positional`) and its value. */
  names: { option: string; value: string }[];
  /** Shell variables the command reads (`$AWS_REGION`). */
  variables: string[];
}

/** Options whose value names a resource (of the deployment, or the operator's own). */
const NAME_OPTIONS = new Set([
  '--stack-name',
  '--function-name',
  '--name',
  '--log-group-name',
  '--topic-arn',
  '--queue-url',
  '--target',
  '--key-id',
  '--db-snapshot-identifier',
]);

/** Splits a command line into words, keeping quoted strings whole (without their quotes). */
function words(line: string): string[] {
  return [...line.matchAll(/'([^']*)'|"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3] ?? '');
}

/**
 * The `aws …` commands of a markdown text: each line of a fenced block that starts with `aws`
 * (backslash continuations joined) and each inline code span that does.
 */
export function docsAwsCommands(markdown: string): DocsAwsCommand[] {
  const lines: string[] = [];
  const fenced = /```[a-z]*\n([\s\S]*?)```/g;
  for (const [, body = ''] of markdown.matchAll(fenced)) {
    for (const line of body.replace(/\\\n\s*/g, ' ').split('\n')) {
      if (/^\s*aws\s/.test(line)) lines.push(line.replace(/\s+#.*$/, '').trim());
    }
  }
  const prose = markdown.replace(fenced, '');
  for (const [, span = ''] of prose.matchAll(/`([^`]+)`/g)) {
    const text = span.replace(/\s+/g, ' ').trim();
    if (/^aws\s/.test(text)) lines.push(text);
  }
  return lines.map((text) => {
    const [, service = '', operation = '', ...rest] = words(text);
    const names: DocsAwsCommand['names'] = [];
    // `aws logs tail <group>`: the log group is the first positional argument.
    if (service === 'logs' && operation === 'tail' && rest[0] && !rest[0].startsWith('-')) {
      names.push({ option: 'positional', value: rest[0] });
    }
    rest.forEach((word, i) => {
      if (NAME_OPTIONS.has(word) && rest[i + 1] !== undefined) {
        names.push({ option: word, value: rest[i + 1] as string });
      }
    });
    const variables = [...text.matchAll(/\$\{?([A-Z_][A-Z0-9_]*)/g)].map((m) => m[1] as string);
    return { text, service, operation, names, variables };
  });
}

/** A section of a markdown text, from its heading to the next heading of the same or a higher level. */
export function markdownSection(markdown: string, heading: string): string {
  const start = markdown.indexOf(heading);
  if (start < 0) throw new Error(`no heading ${heading}`);
  const level = /^#+/.exec(heading)?.[0].length ?? 2;
  const after = markdown.slice(start + heading.length);
  const end = after.search(new RegExp(`^#{1,${level}} `, 'm'));
  return end < 0 ? after : after.slice(0, end);
}
