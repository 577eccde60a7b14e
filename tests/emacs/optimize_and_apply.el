;;; optimize_and_apply.el --- drive eglot against cuda-agent, for tests/test_emacs.py  -*- lexical-binding: t -*-

;; Run as `emacs --batch -l this.el' (Debian's emacs-nox with elpa-eglot, or an Emacs 29+ whose eglot is
;; built in), set up as docs/editors.md says. It types a spec error and fixes it, hovers saxpy, applies the
;; quick fix "Add benchmark spec" to relu, runs "Optimize kernel" for saxpy through the code-action menu,
;; applies the verified rewrite the same way, and writes what it saw to $CUDA_AGENT_EMACS_OUT (JSON).
;; Progress goes to $CUDA_AGENT_EMACS_LOG. Every wait is bounded.

(require 'cl-lib)
(require 'json)
(require 'subr-x)

(defvar cat--out (list (cons 'published []) (cons 'messages []) (cons 'steps [])))
(defvar cat--started (float-time))
(defvar cat--log-file (getenv "CUDA_AGENT_EMACS_LOG"))

(defun cat--log (format-string &rest args)
  (let ((line (format "%6.2fs %s\n" (- (float-time) cat--started) (apply #'format format-string args))))
    (write-region line nil cat--log-file 'append 'silent)))

(defun cat--put (key value)
  (setf (alist-get key cat--out) value))

(defun cat--push (key value)
  (setf (alist-get key cat--out) (vconcat (alist-get key cat--out) (vector value))))

(defun cat--finish (status &optional message)
  (when message
    (cat--log "%s" message)
    (cat--put 'error message))
  (cat--put 'status status)
  (let ((json-encoding-pretty-print nil))
    (with-temp-file (getenv "CUDA_AGENT_EMACS_OUT")
      (insert (json-encode cat--out))))
  (kill-emacs status))

(defun cat--step (name)
  (cat--push 'steps name)
  (cat--log "step: %s" name))

(defun cat--pause ()
  "Batch Emacs is never idle, so its idle timers (eglot sending changes, Flymake starting) never fire:
run the ones that are due, as a pause of the user would."
  (dolist (timer (copy-sequence timer-idle-list))
    (timer-event-handler timer)))

(defun cat--wait-for (what seconds condition)
  "Let Emacs run its processes and timers until CONDITION is non-nil (its value), or fail."
  (let ((deadline (+ (float-time) seconds)) value)
    (while (and (not (setq value (funcall condition))) (< (float-time) deadline))
      (accept-process-output nil 0.05)
      (cat--pause))
    (or value (cat--finish 1 (format "timed out waiting for %s" what)))))

(condition-case err
    (progn
      ;; The setup from docs/editors.md; only the command differs (this checkout's Python, from the test;
      ;; the recorded GPU worker and a scratch cache come through the environment).
      (require 'eglot)
      (define-derived-mode cuda-mode c++-mode "CUDA")
      (add-to-list 'auto-mode-alist '("\\.cuh?\\'" . cuda-mode))
      (add-to-list 'eglot-server-programs
                   `(cuda-mode . (,(getenv "CUDA_AGENT_EMACS_PYTHON") "-m" "cuda_agent" "serve")))
      (add-hook 'cuda-mode-hook #'eglot-ensure)

      ;; Record every publishDiagnostics and showMessage as eglot receives them.
      (advice-add
       'eglot-handle-notification :before
       (lambda (_server method &rest params)
         (pcase method
           ('textDocument/publishDiagnostics
            (let ((diagnostics
                   (mapcar (lambda (d)
                             (let ((start (plist-get (plist-get d :range) :start)))
                               `((message . ,(plist-get d :message))
                                 (severity . ,(plist-get d :severity))
                                 (code . ,(plist-get d :code))
                                 (line . ,(plist-get start :line))
                                 (character . ,(plist-get start :character)))))
                           (plist-get params :diagnostics))))
              (cat--log "publishDiagnostics v%s: %d" (plist-get params :version) (length diagnostics))
              (cat--push 'published `((version . ,(plist-get params :version))
                                      (diagnostics . ,(vconcat diagnostics))))))
           ('window/showMessage
            (cat--log "showMessage: %s" (plist-get params :message))
            (cat--push 'messages `((type . ,(plist-get params :type))
                                   (message . ,(plist-get params :message))))))))

      (cat--step "open")
      (find-file (getenv "CUDA_AGENT_EMACS_FILE"))
      (switch-to-buffer (current-buffer))
      (cat--put 'major_mode (symbol-name major-mode))
      ;; eglot-ensure connects after the command that opened the file, from post-command-hook.
      (run-hooks 'post-command-hook)
      (let ((server (cat--wait-for "the server to start" 20 #'eglot-current-server)))
        (cat--wait-for "the server to initialize" 20
                       (lambda () (eglot--server-capable :hoverProvider)))
        (cat--put 'server_name (plist-get (eglot--server-info server) :name)))

      (cl-flet* ((version () eglot--versioned-identifier)
                 (published-at (version accept)
                   (cl-find-if (lambda (p) (and (equal (alist-get 'version p) version)
                                                (funcall accept (append (alist-get 'diagnostics p) nil))))
                               (append (alist-get 'published cat--out) nil)))
                 (goto-text (text)
                   (goto-char (point-min))
                   (or (search-forward text nil t) (cat--finish 1 (format "no %s in the buffer" text)))
                   (goto-char (match-beginning 0)))
                 (shown ()  ; what Flymake shows in the buffer
                   (mapcar (lambda (d) `((line . ,(1- (line-number-at-pos (flymake-diagnostic-beg d))))
                                         (type . ,(symbol-name (flymake-diagnostic-type d)))
                                         (text . ,(flymake-diagnostic-text d))))
                           (flymake-diagnostics)))
                 (code-action (title-prefix)
                   ;; The code-action menu as a user picks from it (M-x eglot-code-actions at point).
                   (let ((offered nil) (last-nonmenu-event ?\r))
                     (cl-letf (((symbol-function 'completing-read)
                                (lambda (_prompt collection &rest _)
                                  (setq offered (mapcar #'car collection))
                                  (or (cl-find-if (lambda (title) (string-prefix-p title-prefix title)) offered)
                                      (cat--finish 1 (format "no %s among %S" title-prefix offered))))))
                       (call-interactively #'eglot-code-actions))
                     offered)))

        (cat--wait-for "the first diagnostics" 20 (lambda () (published-at (version) #'always)))

        ;; 1. A spec error: a size name the spec does not define, typed into saxpy's x shape.
        (cat--step "spec error")
        (goto-text "x = { role = \"input\"")
        (let ((line (1- (line-number-at-pos))))
          (search-forward "[\"n\"]")
          (backward-char 3)
          (delete-char 1)
          (insert "m")
          (let ((bad (version)))
            (cat--wait-for "the spec error" 20
                           (lambda () (published-at bad (lambda (ds) (cl-some (lambda (d) (eql (alist-get 'severity d) 1)) ds)))))
            (cat--wait-for "Flymake to show it" 20
                           (lambda () (cl-some (lambda (d) (string-match-p "unknown size 'm'" (alist-get 'text d))) (shown))))
            (cat--put 'spec_error `((version . ,bad) (line . ,line) (shown . ,(vconcat (shown)))
                                    (diagnostics . ,(alist-get 'diagnostics (published-at bad (lambda (_) t)))))))
          (backward-char 1)
          (delete-char 1)
          (insert "n")
          (let ((good (version)))
            (cat--wait-for "the spec error to clear" 20
                           (lambda () (published-at good (lambda (ds) (cl-notany (lambda (d) (eql (alist-get 'severity d) 1)) ds)))))
            (cat--wait-for "Flymake to clear it" 20
                           (lambda () (cl-notany (lambda (d) (equal (alist-get 'type d) "eglot-error")) (shown))))
            (cat--put 'cleared_version good)))

        ;; 2. Hover on saxpy: what eldoc shows, and the format the server chose for it.
        (cat--step "hover")
        (goto-text "saxpy(float")
        (let ((shown-hover nil))
          (eglot-hover-eldoc-function (lambda (info &rest _) (setq shown-hover (or info ""))))
          (cat--wait-for "the hover" 20 (lambda () shown-hover))
          (cat--put 'hover shown-hover))
        (let ((raw (jsonrpc-request (eglot--current-server-or-lose) :textDocument/hover
                                    (eglot--TextDocumentPositionParams))))
          (cat--put 'hover_kind (plist-get (plist-get raw :contents) :kind)))

        ;; 3. The quick fix "Add benchmark spec" on relu, whose spec is only inferred.
        (cat--step "add spec")
        (goto-text "relu(const")
        (cat--put 'relu_actions (vconcat (code-action "Add benchmark spec")))
        (let ((added (version)))
          (cat--wait-for "diagnostics for the added spec" 20 (lambda () (published-at (version) #'always)))
          (cat--put 'after_spec (alist-get 'diagnostics (published-at (version) #'always)))
          (cat--put 'spec_version added))

        ;; 4. "Optimize kernel" for saxpy, from the code-action menu; its answer is a message.
        (cat--step "optimize")
        (goto-text "saxpy(float")
        (cat--put 'saxpy_actions (vconcat (code-action "Optimize kernel")))
        (let (rewrite)
          (cat--wait-for "the verified rewrite" 60
                         (lambda ()
                           (published-at (version)
                                         (lambda (ds) (setq rewrite (cl-find "verified-rewrite" ds :key (lambda (d) (alist-get 'code d)) :test #'equal))))))
          (cat--put 'rewrite rewrite)
          (cat--wait-for "Flymake to show it" 20
                         (lambda () (cl-some (lambda (d) (string-match-p "verified rewrite" (alist-get 'text d))) (shown))))
          (cat--put 'shown_rewrite (vconcat (shown))))
        ;; The timings a code lens would show, in the hover (eglot draws no lenses).
        (let ((timed nil))
          (eglot-hover-eldoc-function (lambda (info &rest _) (setq timed (or info ""))))
          (cat--wait-for "the hover with the timings" 20 (lambda () timed))
          (cat--put 'hover_timed timed))

        ;; 5. Apply it from the same menu (the diagnostic under point goes with the request).
        (cat--step "apply")
        (goto-text "saxpy(float")
        (cat--put 'rewrite_actions (vconcat (code-action "Apply verified rewrite")))
        (let ((applied (version)))
          (cat--wait-for "diagnostics for the applied text" 20 (lambda () (published-at applied #'always)))
          (cat--put 'after_apply (alist-get 'diagnostics (published-at applied #'always))))

        (cat--step "write")
        (cat--put 'text (buffer-substring-no-properties (point-min) (point-max)))
        (set-buffer-modified-p nil)
        (eglot-shutdown (eglot-current-server))
        (cat--finish 0)))
  (error (cat--finish 1 (format "error: %S" err))))

;;; optimize_and_apply.el ends here
