" Driven by tests/test_vim.py: a real Vim in a tmux pane, set up with tests/vim/vimrc (docs/editors.md),
" editing a .cu file through ALE's own commands. It types a spec error and fixes it, hovers saxpy
" (:ALEHover), applies "Add benchmark spec" to relu and runs "Optimize kernel" for saxpy from the code-action
" menu (:ALECodeAction), waits for the verified rewrite, hovers again for its timings and applies it the
" same way. It writes what it saw (ALE's diagnostics, the menus, the preview window, the screen) to
" $CUDA_AGENT_VIM_OUT as JSON, then quits. Progress goes to $CUDA_AGENT_VIM_LOG. Every wait is bounded.

let s:out = {'steps': [], 'menus': [], 'screens': {}}
let s:started = reltime()

function! s:Log(message) abort
  call writefile([printf('%6.2fs %s', reltimefloat(reltime(s:started)), a:message)], $CUDA_AGENT_VIM_LOG, 'a')
endfunction

function! s:Finish(status, ...) abort
  if a:0
    let s:out.error = a:1
    call s:Log(a:1)
  endif
  let s:out.status = a:status
  let s:out.screens.last = s:Screen()
  call writefile([json_encode(s:out)], $CUDA_AGENT_VIM_OUT)
  qall!
endfunction

" The terminal as the user sees it (the tmux pane Vim runs in).
function! s:Screen() abort
  redraw
  return system('tmux capture-pane -p -t ' . shellescape($TMUX_PANE))
endfunction

" What ALE shows for the buffer (signs, the location list, the echo under the cursor), with the code.
function! s:Shown() abort
  let l:found = []
  for l:item in get(get(g:ale_buffer_info, s:buffer, {}), 'loclist', [])
    call add(l:found, {'line': l:item.lnum - 1, 'col': l:item.col - 1, 'type': l:item.type,
    \                  'text': l:item.text, 'code': get(l:item, 'code', '')})
  endfor
  return l:found
endfunction

function! s:LineOf(text) abort
  let l:line = search('\V' . escape(a:text, '\'), 'cnw')
  if l:line == 0
    call s:Finish(1, 'no line with ' . a:text)
  endif
  return l:line
endfunction

function! s:CursorOn(text) abort
  let l:line = s:LineOf(a:text)
  call cursor(l:line, stridx(getline(l:line), a:text) + 1)
endfunction

" ALE's code-action menu asks for a number with input(): answer as a user would, with the wanted title's.
runtime autoload/ale/util.vim
let s:pick = ''
function! ale#util#Input(message, value, ...) abort
  call add(s:out.menus, a:message)
  for l:line in split(a:message, "\n")
    let l:found = matchlist(l:line, '^\(\d\+\)) \(.*\)$')
    if !empty(l:found) && stridx(l:found[2], s:pick) == 0
      call s:Log('picked ' . l:found[2])
      return l:found[1]
    endif
  endfor
  let s:pick_failed = 1
  return ''
endfunction

function! s:CodeAction(title) abort
  let s:pick = a:title
  let s:menus_before = len(s:out.menus)
  ALECodeAction
endfunction

function! s:Picked() abort
  if get(s:, 'pick_failed', 0)
    call s:Finish(1, 'no ' . s:pick . ' in the menu: ' . get(s:out.menus, -1, ''))
  endif
  return len(s:out.menus) > s:menus_before
endfunction

function! s:PreviewLines() abort
  for l:window in range(1, winnr('$'))
    if getwinvar(l:window, '&previewwindow')
      let s:hover_asked = 0.0
      return getbufline(winbufnr(l:window), 1, '$')
    endif
  endfor
  " No answer yet: ALE drops a hover asked while another request of the buffer is in flight (a loaded
  " CI machine), so ask again every 2 s rather than wait on a request that will never be answered.
  if s:hover_asked > 0 && reltimefloat(reltime()) - s:hover_asked > 2.0
    call s:AskHover()
  endif
  return []
endfunction

let s:hover_asked = 0.0

function! s:AskHover() abort
  call s:CursorOn('saxpy(float')
  ALEHover
  let s:hover_asked = reltimefloat(reltime())
endfunction

function! s:HasError(text) abort
  return !empty(filter(s:Shown(), {_, d -> d.type is# 'E' && stridx(d.text, a:text) >= 0}))
endfunction

function! s:Rewrite() abort
  return filter(s:Shown(), {_, d -> d.code is# 'verified-rewrite'})
endfunction

" -- the steps: each returns 1 when done; it is called again (every 50 ms) until then --------------------

function! s:Attach() abort
  return index(values(ale#lsp_linter#GetLSPLinterMap()), 'cuda_agent') >= 0
endfunction

" Typed as a user types (feedkeys: Vim then fires TextChanged, and ALE sends the change).
function! s:TypeSpecError() abort
  let l:line = s:LineOf('x = { role = "input"')
  let s:out.x_line = l:line - 1
  call cursor(l:line, stridx(getline(l:line), '["n"]') + 3)
  call feedkeys('rm', 'nt')
  return 1
endfunction

function! s:SpecErrorShown() abort
  if !s:HasError("unknown size 'm'")
    return 0
  endif
  let s:out.spec_error = s:Shown()
  return 1
endfunction

function! s:FixSpecError() abort
  let l:line = s:LineOf('x = { role = "input"')
  call cursor(l:line, stridx(getline(l:line), '["m"]') + 3)
  call feedkeys('rn', 'nt')
  return 1
endfunction

function! s:SpecErrorCleared() abort
  if !empty(filter(s:Shown(), {_, d -> d.type is# 'E'}))
    return 0
  endif
  let s:out.cleared = s:Shown()
  return 1
endfunction

function! s:Hover() abort
  call s:AskHover()
  return 1
endfunction

function! s:HoverShown() abort
  let l:lines = s:PreviewLines()
  if empty(l:lines)
    return 0
  endif
  let s:out.hover = l:lines
  let s:out.screens.hover = s:Screen()
  pclose
  return 1
endfunction

function! s:AddSpec() abort
  call s:CursorOn('relu(const')
  call s:CodeAction('Add benchmark spec')
  return 1
endfunction

function! s:SpecAdded() abort
  if !s:Picked() || search('kernel = "relu"', 'cnw') == 0
    return 0
  endif
  let s:out.relu_menu = s:out.menus[-1]
  return 1
endfunction

function! s:Optimize() abort
  call s:CursorOn('saxpy(float')
  call s:CodeAction('Optimize kernel')
  return 1
endfunction

function! s:OptimizeAnswered() abort
  if !s:Picked()
    return 0
  endif
  let s:out.saxpy_menu = s:out.menus[-1]
  " The server's answer is echoed by ALE at the bottom of the screen.
  let l:screen = s:Screen()
  if stridx(l:screen, 'Optimizing saxpy on NVIDIA H200') < 0
    return 0
  endif
  let s:out.screens.optimize = l:screen
  return 1
endfunction

function! s:RewriteShown() abort
  let l:rewrite = s:Rewrite()
  if empty(l:rewrite)
    return 0
  endif
  let s:out.rewrite = l:rewrite[0]
  return 1
endfunction

function! s:HoverTimings() abort
  call s:AskHover()
  return 1
endfunction

function! s:TimingsShown() abort
  let l:lines = s:PreviewLines()
  if empty(l:lines)
    return 0
  endif
  let s:out.hover_timed = l:lines
  pclose
  return 1
endfunction

function! s:Apply() abort
  call s:CursorOn('saxpy(float')
  call s:CodeAction('Apply verified rewrite')
  return 1
endfunction

function! s:Applied() abort
  if !s:Picked() || search('block = \[128\]', 'cnw') != 0
    return 0
  endif
  let s:out.rewrite_menu = s:out.menus[-1]
  return 1
endfunction

function! s:HoverApplied() abort
  call s:AskHover()
  return 1
endfunction

" The server has the applied text: its hover shows the new launch, and the suggestion is gone.
function! s:AppliedSeen() abort
  let l:lines = s:PreviewLines()
  if empty(l:lines) || !empty(s:Rewrite())
    return 0
  endif
  pclose
  let s:out.hover_applied = l:lines
  let s:out.after_apply = s:Shown()
  let s:out.text = join(getline(1, '$'), "\n") . "\n"
  return 1
endfunction

let s:steps = [
\   ['attach', 20, function('s:Attach')],
\   ['type a spec error', 5, function('s:TypeSpecError')],
\   ['the spec error shown', 20, function('s:SpecErrorShown')],
\   ['fix it', 5, function('s:FixSpecError')],
\   ['the spec error cleared', 20, function('s:SpecErrorCleared')],
\   ['hover', 5, function('s:Hover')],
\   ['the hover shown', 20, function('s:HoverShown')],
\   ['add spec', 5, function('s:AddSpec')],
\   ['the spec added', 20, function('s:SpecAdded')],
\   ['optimize', 5, function('s:Optimize')],
\   ['the optimize answer', 20, function('s:OptimizeAnswered')],
\   ['the verified rewrite', 60, function('s:RewriteShown')],
\   ['hover the timings', 5, function('s:HoverTimings')],
\   ['the timings shown', 20, function('s:TimingsShown')],
\   ['apply', 5, function('s:Apply')],
\   ['the rewrite applied', 20, function('s:Applied')],
\   ['hover the applied text', 5, function('s:HoverApplied')],
\   ['the server saw it', 20, function('s:AppliedSeen')],
\]
let s:index = -1

function! s:Tick(timer) abort
  try
    if s:index >= len(s:steps)
      return
    endif
    if s:index < 0 || s:done
      let s:index += 1
      if s:index == len(s:steps)
        call s:Finish(0)
        return
      endif
      let [l:name, l:seconds, l:Run] = s:steps[s:index]
      call add(s:out.steps, l:name)
      call s:Log('step: ' . l:name)
      let s:deadline = reltimefloat(reltime()) + l:seconds
    endif
    let s:done = s:steps[s:index][2]()
    if !s:done && reltimefloat(reltime()) > s:deadline
      call s:Finish(1, 'timed out waiting for ' . s:steps[s:index][0])
    endif
  catch
    call s:Finish(1, 'error: ' . v:exception . ' at ' . v:throwpoint)
  endtry
endfunction

let s:buffer = bufnr('%')
let s:done = 0
let s:out.filetype = &filetype
call timer_start(50, function('s:Tick'), {'repeat': -1})
