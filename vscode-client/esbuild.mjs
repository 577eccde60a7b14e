// Bundles the extension and vscode-languageclient into one file, so the .vsix needs no node_modules.
// `node esbuild.mjs --production` minifies and drops the source map.
import * as esbuild from 'esbuild';

const production = process.argv.includes('--production');

await esbuild.build({
  entryPoints: ['src/extension.ts'],
  bundle: true,
  outfile: 'dist/extension.js',
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  external: ['vscode'], // provided by the editor at run time
  minify: production,
  sourcemap: !production,
  sourcesContent: false,
  logLevel: 'info',
});
