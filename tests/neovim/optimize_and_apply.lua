-- Driven by tests/test_neovim.py: a headless Neovim (`nvim --headless -u NONE -l this.lua`) set up the
-- way docs/neovim.md says, against the real server. It edits a spec into an error, runs "Optimize
-- kernel" for saxpy, applies the verified rewrite through code actions, and writes what it saw to
-- $CUDA_AGENT_NVIM_OUT (JSON). Progress goes to $CUDA_AGENT_NVIM_LOG. Every wait is bounded.

local env = vim.env
local log_file = assert(io.open(assert(env.CUDA_AGENT_NVIM_LOG), 'w'))
local started = vim.uv.hrtime()

local function log(fmt, ...)
  local line = string.format('%6.2fs ', (vim.uv.hrtime() - started) / 1e9) .. string.format(fmt, ...)
  log_file:write(line, '\n')
  log_file:flush()
end

local out = { published = {}, steps = {}, confirm = nil }

local function finish(status, message)
  if message then
    log('%s', message)
    out.error = message
  end
  out.status = status
  local f = assert(io.open(assert(env.CUDA_AGENT_NVIM_OUT), 'w'))
  f:write(vim.json.encode(out))
  f:close()
  log_file:close()
  os.exit(status)
end

local function step(name)
  table.insert(out.steps, name)
  log('step: %s', name)
end

local function wait_for(what, timeout_ms, condition)
  local ok = vim.wait(timeout_ms, condition, 20)
  if not ok then
    finish(1, 'timed out waiting for ' .. what)
  end
end

-- Record every publishDiagnostics, in order, with its version, before Neovim turns it into
-- vim.diagnostic entries (those drop the version).
local publish = vim.lsp.handlers['textDocument/publishDiagnostics']
vim.lsp.handlers['textDocument/publishDiagnostics'] = function(err, result, ctx, config)
  table.insert(out.published, result)
  log('publishDiagnostics v%s: %d diagnostic(s)', tostring(result.version), #result.diagnostics)
  return publish(err, result, ctx, config)
end

-- An edit with a change annotation that needs confirmation makes Neovim ask with confirm(). The server
-- annotates only inside documentChanges, which Neovim (0.11, 0.12-dev) does not advertise, so this should
-- not be called; if it is, answer Yes as a user would (headless, confirm() would wait) and keep the
-- question for the test.
vim.fn.confirm = function(message)
  out.confirm = message
  log('confirm: %s', message)
  return 1
end

local ok_notify = vim.notify
vim.notify = function(message, level, opts)
  log('notify[%s]: %s', tostring(level), message)
  return ok_notify(message, level, opts)
end

vim.cmd('filetype on')

-- The configuration from docs/neovim.md; only the command and its environment differ (this checkout's
-- Python, the recorded GPU worker and a scratch cache, from the test).
-- With $CUDA_AGENT_NVIM_PORT, the remote variant: connect to a `serve --tcp` the test started.
local config = { filetypes = { 'cuda' }, root_markers = { '.git' } }
if env.CUDA_AGENT_NVIM_PORT then
  config.cmd = vim.lsp.rpc.connect('127.0.0.1', tonumber(env.CUDA_AGENT_NVIM_PORT))
else
  config.cmd = { env.CUDA_AGENT_NVIM_PYTHON, '-m', 'cuda_agent', 'serve' }
  config.cmd_env = {
    CUDA_AGENT_RECORDED_WORKER = env.CUDA_AGENT_RECORDED_WORKER,
    CUDA_AGENT_CACHE_DIR = env.CUDA_AGENT_CACHE_DIR,
  }
end
vim.lsp.config('cuda_agent', config)
vim.lsp.enable('cuda_agent')

step('open')
vim.cmd.edit(vim.fn.fnameescape(assert(env.CUDA_AGENT_NVIM_FILE)))
local bufnr = vim.api.nvim_get_current_buf()
local uri = vim.uri_from_bufnr(bufnr)
out.filetype = vim.bo[bufnr].filetype
out.transport = env.CUDA_AGENT_NVIM_PORT and 'tcp' or 'stdio'
log('filetype=%s uri=%s', out.filetype, uri)

local client
wait_for('the client to attach', 10000, function()
  client = vim.lsp.get_clients({ bufnr = bufnr, name = 'cuda_agent' })[1]
  return client ~= nil and client.initialized
end)
out.root_dir = client.root_dir
out.server_name = client.server_info and client.server_info.name or nil
log('attached: client %d, root %s, encoding %s', client.id, tostring(client.root_dir), client.offset_encoding)

local function buffer_version()
  return vim.lsp.util.buf_versions[bufnr]
end

local function diagnostics_at(version, accept)
  for _, params in ipairs(out.published) do
    if params.uri == uri and params.version == version and accept(params.diagnostics) then
      return params.diagnostics
    end
  end
end

local function line_of(pattern)
  for i, line in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, -1, true)) do
    if line:find(pattern, 1, true) then
      return i - 1, line
    end
  end
  finish(1, 'no line with ' .. pattern)
end

-- 1. A spec error: a size name the spec does not define, typed into saxpy's x shape.
step('spec error')
wait_for('the first diagnostics', 10000, function()
  return diagnostics_at(buffer_version(), function()
    return true
  end) ~= nil
end)
local x_line, x_text = line_of('x = { role = "input"')
local column = assert(x_text:find('["n"]', 1, true)) -- 1-based column of the [
vim.api.nvim_buf_set_text(bufnr, x_line, column + 1, x_line, column + 2, { 'm' })
local bad_version = buffer_version()
local spec_errors
wait_for('the spec error', 10000, function()
  spec_errors = diagnostics_at(bad_version, function(ds)
    return #ds > 0
  end)
  return spec_errors ~= nil
end)
out.spec_error = { version = bad_version, line = x_line, diagnostics = spec_errors }

-- Fixed again: the error goes away.
vim.api.nvim_buf_set_text(bufnr, x_line, column + 1, x_line, column + 2, { 'n' })
local good_version = buffer_version()
wait_for('the spec error to clear', 10000, function()
  return diagnostics_at(good_version, function(ds)
    for _, d in ipairs(ds) do
      if d.severity == vim.diagnostic.severity.ERROR then
        return false
      end
    end
    return true
  end) ~= nil
end)
out.cleared_version = good_version

-- Hover on saxpy (Neovim renders Markdown, and asks for it), and the code actions on relu, whose spec is
-- only inferred (the quick fix is listed; applying it is the Emacs and Vim tests' part).
step('hover and quick fix')
local saxpy_line, saxpy_text = line_of('void saxpy(')
vim.api.nvim_win_set_cursor(0, { saxpy_line + 1, (assert(saxpy_text:find('saxpy', 1, true))) })
local position = vim.lsp.util.make_position_params(0, client.offset_encoding)
local hovered = client:request_sync('textDocument/hover', position, 10000, bufnr)
if not hovered or hovered.err or not hovered.result then
  finish(1, 'hover failed: ' .. vim.inspect(hovered))
end
out.hover = hovered.result.contents
local relu_line, relu_text = line_of('void relu(')
local relu_at = { line = relu_line, character = (assert(relu_text:find('relu', 1, true))) }
local relu_actions = client:request_sync('textDocument/codeAction', {
  textDocument = { uri = uri },
  range = { start = relu_at, ['end'] = relu_at },
  context = { diagnostics = {}, triggerKind = 1 },
}, 10000, bufnr)
out.relu_titles = {}
for _, action in ipairs(relu_actions and relu_actions.result or {}) do
  table.insert(out.relu_titles, action.title)
end

-- 2. "Optimize kernel" for saxpy (the command behind the code lens and the code action).
step('optimize')
local started_answer
client:exec_cmd({ title = 'Optimize kernel', command = 'cudaAgent.optimize', arguments = { uri, 'saxpy' } }, {
  bufnr = bufnr,
}, function(err, result)
  started_answer = { err = err, result = result }
end)
wait_for('the optimize command to answer', 10000, function()
  return started_answer ~= nil
end)
out.optimize = started_answer
if started_answer.err then
  finish(1, 'optimize failed: ' .. vim.inspect(started_answer.err))
end

local rewrite
wait_for('the verified rewrite', 60000, function()
  diagnostics_at(good_version, function(ds)
    for _, d in ipairs(ds) do
      if d.code == 'verified-rewrite' then
        rewrite = d
        return true
      end
    end
    return false
  end)
  return rewrite ~= nil
end)
out.rewrite = rewrite
-- What Neovim shows for that line (vim.diagnostic, not the raw notification).
out.shown = {}
for _, d in ipairs(vim.diagnostic.get(bufnr, { lnum = rewrite.range.start.line })) do
  table.insert(out.shown, { message = d.message, severity = d.severity, code = d.code, lnum = d.lnum })
end

-- 3. The code actions at that line, resolve "Apply verified rewrite", apply its edit.
step('code actions')
local params = vim.lsp.util.make_range_params(0, client.offset_encoding)
params.range = rewrite.range
params.context = { diagnostics = { rewrite }, triggerKind = 1 }
local answer, request_err = client:request_sync('textDocument/codeAction', params, 10000, bufnr)
if not answer or answer.err then
  finish(1, 'codeAction failed: ' .. vim.inspect(request_err or answer))
end
out.action_titles = {}
local apply
for _, action in ipairs(answer.result or {}) do
  table.insert(out.action_titles, action.title)
  if action.title:find('^Apply verified rewrite') then
    apply = action
  end
end
if not apply then
  finish(1, 'no "Apply verified rewrite" action among ' .. vim.inspect(out.action_titles))
end
out.apply_had_edit = apply.edit ~= nil

step('resolve')
local resolved = client:request_sync('codeAction/resolve', apply, 10000, bufnr)
if not resolved or resolved.err or not resolved.result.edit then
  finish(1, 'codeAction/resolve failed: ' .. vim.inspect(resolved))
end

step('apply')
out.edit_form = resolved.result.edit.documentChanges and 'documentChanges' or 'changes'
vim.lsp.util.apply_workspace_edit(resolved.result.edit, client.offset_encoding)
local applied_version = buffer_version()
out.applied_version = applied_version
-- The new text is sent to the server; its suggestion is gone at the new version.
wait_for('diagnostics for the applied text', 10000, function()
  return diagnostics_at(applied_version, function()
    return true
  end) ~= nil
end)
out.after_apply = diagnostics_at(applied_version, function()
  return true
end)

step('write')
out.text = table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, true), '\n') .. '\n'
client:stop()
wait_for('the server to stop', 5000, function()
  return client:is_stopped()
end)
finish(0)
