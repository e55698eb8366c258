# The IPython kernel of Sandboxer's code interpreter: plain tracebacks (no ANSI colours, as
# E2B's), whole sequences in text results, and no history database (a fork or a restore then
# never shares or locks a file).
c = get_config()  # noqa: F821
c.InteractiveShell.colors = "NoColor"
c.PlainTextFormatter.max_seq_length = 0
c.HistoryManager.enabled = False
