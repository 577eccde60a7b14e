// The candidates view's page: a table and an SVG chart, drawn from the model with the editor's theme
// colours. No remote content; the only script posts the buttons' clicks back to the extension.

import { type CandidatesModel, type ChartBar, formatMs, formatSpeedup } from './candidates';

export interface PageOptions {
  nonce: string;
  cspSource: string;
  current: boolean; // the result still describes the document's text
}

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

const BAR_COLOURS: Record<ChartBar['kind'], string> = {
  original: 'var(--vscode-charts-blue, #3794ff)',
  best: 'var(--vscode-charts-green, #89d185)',
  faster: 'var(--vscode-charts-green, #89d185)',
  same: 'var(--vscode-disabledForeground, #888)',
  slower: 'var(--vscode-charts-orange, #d18616)',
};

/** Horizontal bars of time per candidate, with the roofline as a dashed line (shorter is better). */
export function chartSvg(model: CandidatesModel): string {
  if (model.bars.length === 0) {
    return '';
  }
  const rowHeight = 18;
  const labelWidth = 70;
  const valueWidth = 80;
  const plotWidth = 420;
  const top = 22;
  const height = top + rowHeight * model.bars.length + 8;
  const maxMs = Math.max(...model.bars.map((b) => b.timeMs), model.rooflineMs ?? 0);
  const x = (ms: number): number => labelWidth + (plotWidth * ms) / maxMs;
  const rows = model.bars.map((bar, i) => {
    const y = top + i * rowHeight;
    const width = Math.max(1, x(bar.timeMs) - labelWidth);
    const tooltip = escapeHtml(`${bar.label}: ${formatMs(bar.timeMs)}`);
    return (
      `<text x="${labelWidth - 6}" y="${y + 12}" text-anchor="end">${escapeHtml(bar.label)}</text>` +
      `<rect class="bar ${bar.kind}" x="${labelWidth}" y="${y + 2}" width="${width.toFixed(1)}" ` +
      `height="${rowHeight - 5}" fill="${BAR_COLOURS[bar.kind]}"><title>${tooltip}</title></rect>` +
      `<text x="${(labelWidth + width + 4).toFixed(1)}" y="${y + 12}">${formatMs(bar.timeMs)}</text>`
    );
  });
  let roofline = '';
  if (model.rooflineMs !== null) {
    const rx = x(model.rooflineMs).toFixed(1);
    roofline =
      `<line class="roofline" x1="${rx}" y1="${top - 4}" x2="${rx}" y2="${height - 4}" ` +
      'stroke="var(--vscode-charts-red, #f14c4c)" stroke-dasharray="4 3"/>' +
      `<text x="${rx}" y="${top - 8}" text-anchor="middle">roofline ${formatMs(model.rooflineMs)}</text>`;
  }
  const width = labelWidth + plotWidth + valueWidth;
  return (
    '<svg class="chart" role="img" aria-label="Time per candidate against the roofline" ' +
    `width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">` +
    rows.join('') +
    roofline +
    '</svg>'
  );
}

export function candidatesHtml(model: CandidatesModel, options: PageOptions): string {
  const rows = model.candidates
    .map((c) => {
      const verification = c.verification === 'verified' ? '✓ verified' : `✗ ${c.verification}`;
      const cls = [c.best ? 'best' : '', c.verification === 'verified' ? '' : 'failed'].filter(Boolean).join(' ');
      return (
        `<tr class="${cls}"><td>${c.index}</td><td>${escapeHtml(c.description)}${c.best ? ' <strong>(best)</strong>' : ''}</td>` +
        `<td>${escapeHtml(c.proposer)}</td><td>${escapeHtml(verification)}</td><td>${escapeHtml(c.status)}</td>` +
        `<td class="num">${c.timeMs !== null ? formatMs(c.timeMs) : '—'}</td>` +
        `<td class="num">${c.speedup !== null ? formatSpeedup(c.speedup) : '—'}</td>` +
        `<td>${escapeHtml(c.reason)}</td></tr>`
      );
    })
    .join('');
  const notes: string[] = [];
  if (model.searching) {
    notes.push('The search goes on: this is the best so far.');
  }
  if (!options.current) {
    notes.push('The text has changed since: this result is for an earlier version and can no longer be applied.');
  }
  const actions = [
    ...(model.hasRewrite && options.current
      ? [
          '<button data-command="diff">Preview diff</button>',
          '<button data-command="apply">Apply verified rewrite</button>',
          '<button data-command="reject" class="secondary">Reject</button>',
        ]
      : []),
    ...(model.hasTranscript ? ['<button data-command="transcript" class="secondary">LLM transcript</button>'] : []),
  ];
  const buttons = actions.length > 0 ? `<div class="actions">${actions.join(' ')}</div>` : '';
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src ${options.cspSource} 'nonce-${options.nonce}'; script-src 'nonce-${options.nonce}';">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>${escapeHtml(model.kernel)}: candidates</title>
<style nonce="${options.nonce}">
  body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); padding: 0 16px 16px; }
  h1 { font-size: 1.3em; margin-bottom: 0.2em; }
  .details { color: var(--vscode-descriptionForeground); margin: 0.2em 0; }
  .note { color: var(--vscode-editorWarning-foreground); }
  table { border-collapse: collapse; margin-top: 12px; }
  th, td { text-align: left; padding: 3px 10px 3px 0; border-bottom: 1px solid var(--vscode-panel-border, #444); vertical-align: top; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  tr.best td { color: var(--vscode-charts-green, #89d185); }
  tr.failed td { color: var(--vscode-disabledForeground, #888); }
  svg.chart text { fill: var(--vscode-foreground); font-size: 11px; }
  .actions { margin: 10px 0; }
  button { background: var(--vscode-button-background); color: var(--vscode-button-foreground); border: none; padding: 4px 12px; cursor: pointer; }
  button.secondary { background: var(--vscode-button-secondaryBackground); color: var(--vscode-button-secondaryForeground); }
</style>
</head>
<body>
<h1>${escapeHtml(model.headline)}</h1>
${model.details.map((line) => `<p class="details">${escapeHtml(line)}</p>`).join('\n')}
${notes.map((line) => `<p class="note">${escapeHtml(line)}</p>`).join('\n')}
${buttons}
<h2>Time per candidate</h2>
${chartSvg(model) || '<p class="details">No candidate was timed.</p>'}
<h2>Candidates (${model.candidates.length})</h2>
<table>
<thead><tr><th>#</th><th>change</th><th>proposer</th><th>verification</th><th>status</th><th>time</th><th>speedup</th><th>why</th></tr></thead>
<tbody>${rows}</tbody>
</table>
<script nonce="${options.nonce}">
  const vscode = acquireVsCodeApi();
  for (const button of document.querySelectorAll('button[data-command]')) {
    button.addEventListener('click', () => vscode.postMessage({ command: button.dataset.command }));
  }
</script>
</body>
</html>`;
}

/** After a rejection, a closed file or a restarted server: the server no longer holds the result. */
export function noResultHtml(kernel: string): string {
  return `<!DOCTYPE html>
<html lang="en">
<head><meta charset="UTF-8"><meta http-equiv="Content-Security-Policy" content="default-src 'none';"></head>
<body style="font-family: var(--vscode-font-family); color: var(--vscode-foreground); padding: 0 16px;">
<p>No current result for ${escapeHtml(kernel)}: the suggestion was rejected, the file was closed, or the server
restarted. Run <strong>CUDA Agent: Optimize Kernel</strong> to search again.</p>
</body>
</html>`;
}
