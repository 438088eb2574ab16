/**
 * A dependency-free SVG chart for the bench: side-by-side panels, each plotting one measure of
 * several series against the bus latency (categorical x axis, logarithmic y axis, since the
 * contenders differ by orders of magnitude).
 */

/** One line of a panel: a contender's value at each x category (missing = not measured). */
export interface ChartSeries {
  name: string;
  color: string;
  values: (number | undefined)[];
}

/** One panel. */
export interface ChartPanel {
  title: string;
  /** Unit shown after tick labels. */
  unit: string;
  series: ChartSeries[];
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const fmt = (v: number) => (v >= 1000 ? `${Math.round(v / 100) / 10}k` : String(Math.round(v)));

/**
 * Draws `panels` side by side over the x categories `xs` (labels such as "0 ms").
 * @returns the SVG document
 */
export function lineChart(title: string, xs: string[], panels: ChartPanel[], note = ''): string {
  const pw = 420;
  const ph = 300;
  const m = { l: 64, r: 16, t: 72, b: 56 };
  const width = panels.length * (pw + m.l + m.r);
  const height = ph + m.t + m.b;
  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" role="img" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="12">`,
    `<title>${esc(title)}: ${esc(panels.map((p) => p.title).join(' and '))} against bus latency</title>`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${width / 2}" y="22" text-anchor="middle" font-size="15" font-weight="600">${esc(title)}</text>`,
  );
  panels.forEach((panel, p) => {
    const ox = p * (pw + m.l + m.r) + m.l;
    const oy = m.t;
    const values = panel.series.flatMap((s) => s.values.filter((v): v is number => v !== undefined && v > 0));
    const lo = 10 ** Math.floor(Math.log10(Math.min(...values)));
    const hi = 10 ** Math.ceil(Math.log10(Math.max(...values)));
    const y = (v: number) =>
      oy + ph - ((Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * ph;
    const x = (i: number) => ox + (xs.length === 1 ? pw / 2 : (i / (xs.length - 1)) * (pw - 40) + 20);
    parts.push(
      `<text x="${ox + pw / 2}" y="${oy - 8}" text-anchor="middle" font-size="13" font-weight="600">${esc(panel.title)}</text>`,
      `<rect x="${ox}" y="${oy}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`,
    );
    for (let d = lo; d <= hi; d *= 10) {
      for (const k of [1, 2, 5]) {
        const v = d * k;
        if (v > hi) break;
        parts.push(
          `<line x1="${ox}" x2="${ox + pw}" y1="${y(v)}" y2="${y(v)}" stroke="${k === 1 ? '#ddd' : '#f0f0f0'}"/>`,
          `<text x="${ox - 6}" y="${y(v) + 4}" text-anchor="end" fill="#555">${fmt(v)}</text>`,
        );
      }
    }
    xs.forEach((label, i) => {
      parts.push(
        `<text x="${x(i)}" y="${oy + ph + 18}" text-anchor="middle" fill="#555">${esc(label)}</text>`,
      );
    });
    parts.push(
      `<text x="${ox + pw / 2}" y="${oy + ph + 36}" text-anchor="middle" fill="#333">bus latency</text>`,
      `<text transform="translate(${ox - 48} ${oy + ph / 2}) rotate(-90)" text-anchor="middle" fill="#333">${esc(panel.unit)} (log scale)</text>`,
    );
    panel.series.forEach((s, si) => {
      const pts = s.values
        .map((v, i) => (v === undefined || v <= 0 ? undefined : ([x(i), y(v), v] as const)))
        .filter((pt): pt is readonly [number, number, number] => pt !== undefined);
      if (pts.length > 1) {
        parts.push(
          `<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${pts.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(' ')}"/>`,
        );
      }
      // Value labels go above, below, or left of the points by series, so close lines do not overprint.
      const [dx, dy, anchor] = [
        [6, -7, 'start'],
        [6, 15, 'start'],
        [-7, 4, 'end'],
      ][si % 3] as [number, number, string];
      for (const [a, b, v] of pts) {
        parts.push(
          `<circle cx="${a.toFixed(1)}" cy="${b.toFixed(1)}" r="3.5" fill="${s.color}"/>`,
          `<text x="${(a + dx).toFixed(1)}" y="${(b + dy).toFixed(1)}" text-anchor="${anchor}" fill="${s.color}" font-size="11">${fmt(v)}</text>`,
        );
      }
    });
  });
  // One legend for all panels, under the title; entries spaced by their text (about 7 px a character).
  const names = [
    ...new Map(panels.flatMap((p) => p.series.map((s) => [s.name, s.color] as const))).entries(),
  ];
  let lx = m.l;
  for (const [name, color] of names) {
    parts.push(
      `<rect x="${lx}" y="34" width="12" height="12" fill="${color}"/>`,
      `<text x="${lx + 16}" y="44">${esc(name)}</text>`,
    );
    lx += 16 + name.length * 7 + 24;
  }
  if (note) parts.push(`<text x="8" y="${height - 6}" fill="#777" font-size="11">${esc(note)}</text>`);
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
