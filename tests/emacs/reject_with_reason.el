;;; reject_with_reason.el --- reject a rewrite with a reason through eglot, for tests/test_feedback_emacs.py  -*- lexical-binding: t -*-

;; Run as `emacs --batch -l this.el', set up as docs/editors.md says (as optimize_and_apply.el is). It runs
;; "Optimize kernel" for saxpy from the code-action menu, and when the verified rewrite arrives picks
;; "Reject suggestion: $CUDA_AGENT_EMACS_REASON" from the same menu; it writes the menus it was offered and
;; what became of the rewrite's diagnostic to $CUDA_AGENT_EMACS_OUT (JSON). Every wait is bounded.

(require 'cl-lib)
(require 'json)

(defvar cat--out nil)

(defun cat--finish (status &optional message)
  (when message
    (setf (alist-get 'error cat--out) message))
  (setf (alist-get 'status cat--out) status)
  (with-temp-file (getenv "CUDA_AGENT_EMACS_OUT")
    (insert (json-encode cat--out)))
  (kill-emacs status))

(defun cat--wait-for (what seconds condition)
  "Let Emacs run its processes and idle timers (batch Emacs is never idle) until CONDITION holds."
  (let ((deadline (+ (float-time) seconds)) value)
    (while (and (not (setq value (funcall condition))) (< (float-time) deadline))
      (accept-process-output nil 0.05)
      (dolist (timer (copy-sequence timer-idle-list))
        (timer-event-handler timer)))
    (or value (cat--finish 1 (format "timed out waiting for %s" what)))))

(defun cat--rewrite-shown ()
  (cl-some (lambda (d) (string-match-p "verified rewrite" (flymake-diagnostic-text d))) (flymake-diagnostics)))

(defun cat--code-action (title)
  "Pick TITLE from eglot's code-action menu at point, as a user does; the titles the menu offered."
  (let ((offered nil) (last-nonmenu-event ?\r))
    (cl-letf (((symbol-function 'completing-read)
               (lambda (_prompt collection &rest _)
                 (setq offered (mapcar #'car collection))
                 (or (cl-find title offered :test #'string=)
                     (cat--finish 1 (format "no %s among %S" title offered))))))
      (call-interactively #'eglot-code-actions))
    (vconcat offered)))

(condition-case err
    (progn
      (require 'eglot)
      (define-derived-mode cuda-mode c++-mode "CUDA")
      (add-to-list 'auto-mode-alist '("\\.cuh?\\'" . cuda-mode))
      (add-to-list 'eglot-server-programs
                   `(cuda-mode . (,(getenv "CUDA_AGENT_EMACS_PYTHON") "-m" "cuda_agent" "serve")))
      (add-hook 'cuda-mode-hook #'eglot-ensure)
      (find-file (getenv "CUDA_AGENT_EMACS_FILE"))
      (switch-to-buffer (current-buffer))
      (run-hooks 'post-command-hook)  ; eglot-ensure connects from there
      (cat--wait-for "the server to start" 20 #'eglot-current-server)
      (cat--wait-for "the server to initialize" 20 (lambda () (eglot--server-capable :codeActionProvider)))
      (goto-char (point-min))
      (search-forward "saxpy(float")
      (goto-char (match-beginning 0))
      (cat--wait-for "the first diagnostics" 20 (lambda () (flymake-diagnostics) t))
      (cat--code-action "Optimize kernel: saxpy")
      (cat--wait-for "the verified rewrite" 60 #'cat--rewrite-shown)
      (setf (alist-get 'rewrite_actions cat--out)
            (cat--code-action (concat "Reject suggestion: " (getenv "CUDA_AGENT_EMACS_REASON"))))
      (cat--wait-for "the rewrite to go" 20 (lambda () (not (cat--rewrite-shown))))
      (setf (alist-get 'rewrite_gone cat--out) t)
      (set-buffer-modified-p nil)
      (eglot-shutdown (eglot-current-server))  ; the server writes its last records before it leaves
      (cat--finish 0))
  (error (cat--finish 1 (format "error: %S" err))))

;;; reject_with_reason.el ends here
