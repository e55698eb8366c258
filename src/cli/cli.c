/*
 * The command-line client: global options, the verb table, help, dispatch.
 *
 * To add a verb, write its handler in a cmd_<group>.c file, declare it in cli_internal.h and
 * add a row to `verbs` below, beside the rows of its section (`sandboxer --help` prints a
 * heading where the section changes); parsing, --help, --json and error printing come from here.
 */
#include "cli.h"

#include <curl/curl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli_internal.h"
#include "common/cleanup.h"
#include "config.h"

static const struct cli_verb verbs[] = {
    {
        .name = "create",
        .section = "Sandboxes",
        .run = cmd_create,
        .summary = "create a sandbox from a template, an image or a snapshot",
        .synopsis = "[IMAGE|TEMPLATE] [OPTIONS] [--] [ARGS...]\n"
                    "       sandboxer create --template NAME [OPTIONS]\n"
                    "       sandboxer create --snapshot NAME [--label L] [--hostname H]",
        .help = "Creates a sandbox and prints its id on stdout, so that `ID=$(sandboxer create)`\n"
                "captures it. With no IMAGE it starts from the template `base` (Debian 12 with\n"
                "python3, node, git, curl and sudo, user `user`; see `sandboxer template ls`),\n"
                "which needs no registry. A bare name that is a template (base,\n"
                "code-interpreter, your own) means that template; any other IMAGE is pulled\n"
                "first if the daemon lacks it, which may take minutes. The main process is ARGS\n"
                "if given, else the image's entrypoint and command; with neither, the sandbox\n"
                "idles, ready for exec. Options end at the first of ARGS; `--` ends them\n"
                "explicitly. A template with a warm pool answers at once with a started sandbox\n"
                "when only --label and --public are given.\n"
                "\n"
                "With --snapshot NAME instead of IMAGE, the sandbox starts from your snapshot\n"
                "NAME (see `sandboxer snapshot create`): its files and, if the snapshot kept\n"
                "them, its running processes and their memory. Its image, process, environment\n"
                "and limits come from the snapshot, so only --label and --hostname apply.\n"
                "\n"
                "Options:\n"
                "  --template NAME  start from the template NAME (as a bare IMAGE does)\n"
                "  --snapshot NAME  start from the snapshot NAME instead of an IMAGE\n"
                "  --label L        a label to show in `ls`\n"
                "  --hostname H     the sandbox's hostname\n"
                "  --interactive    keep a terminal for the main process (attach)\n"
                "  --env K=V        set an environment variable (repeatable)\n"
                "  --cpus N         CPUs it may use, e.g. 0.5 or 2\n"
                "  --memory SIZE    memory limit, e.g. 512M or 2G (or bytes)\n"
                "  --pids N         the most processes it may run\n"
                "  --disk SIZE      the most its files may take, e.g. 2G (needs a daemon\n"
                "                   whose state dir is on btrfs or has project quotas)\n"
                "  --public         let its --port ports (else the image's exposed ones) be\n"
                "                   reached without a token; other ports stay its owner's\n"
                "  --port N         a port of the sandbox to proxy (repeatable)\n"
                "  --network MODE   its way out: none, open (NAT), or proxy (only the\n"
                "                   --allow hosts, through the daemon's egress proxy);\n"
                "                   default: the daemon's --default-network\n"
                "  --allow HOST     with --network proxy: a host it may reach, *.DOMAIN for\n"
                "                   its subdomains, or an IPv4 address (repeatable)\n"
                "  --net-raw        keep CAP_NET_RAW (raw sockets: tcpdump, arping); ping\n"
                "                   works without it\n"
                "  --setuid         let setuid programs (sudo) gain privileges; templates'\n"
                "                   sandboxes have it already\n"
                "  --runtime NAME   runc, or runsc (gVisor: docs/runsc.md); default: the\n"
                "                   daemon's --runtime\n",
        .opts = "+label=,interactive,env=,hostname=,cpus=,memory=,pids=,disk=,public,port=,"
                "snapshot=,network=,allow=,net-raw,template=,setuid,runtime=",
        .min_args = 0,
        .fixed_args = 1, /* IMAGE, when given, does not end the options */
        .max_args = -1,
    },
    {
        .name = "ls",
        .section = "Sandboxes",
        .run = cmd_ls,
        .summary = "list sandboxes",
        .synopsis = "[--all]",
        .help = "Lists your sandboxes: ID (its first 12 digits, which other commands accept),\n"
                "NAME, LABEL, IMAGE, STATUS and CREATED (local time).\n"
                "With --json, the daemon's answer as it came, terminated sandboxes included.\n"
                "\n"
                "Options:\n"
                "  --all   also list terminated sandboxes\n",
        .opts = "all",
    },
    {
        .name = "inspect",
        .section = "Sandboxes",
        .run = cmd_inspect,
        .summary = "show a sandbox in full (JSON)",
        .synopsis = "ID",
        .help = "Prints the sandbox object as indented JSON, with or without --json. ID is its\n"
                "id, a unique start of it (as `ls` shows), or its name.\n",
        .min_args = 1,
        .max_args = 1,
    },
    {
        .name = "exec",
        .section = "Sandboxes",
        .run = cmd_exec,
        .summary = "run a command in a sandbox",
        .synopsis = "[-d] ID [OPTIONS] [--] CMD [ARGS...] | [-d] ID --code CODE",
        .help = "Runs CMD with ARGS in the sandbox (no shell), or with --code the shell code\n"
                "CODE (as `sh -c CODE`), and streams its stdout and stderr to ours as they\n"
                "come. The exit status is the command's own (255 if it does not fit), or 1\n"
                "when the daemon reports an error. Options end at CMD; `--` ends them\n"
                "explicitly. With --json, the stream's ndjson events are printed as they come.\n"
                "\n"
                "With -d the command runs in the background, owned by the sandbox (not by this\n"
                "connection): its pid is printed at once (--json: its record), and `ps`,\n"
                "`logs --process PID` and `kill` reach it; it and its output stay through a\n"
                "fork, a hibernation or a daemon restart.\n"
                "\n"
                "Options:\n"
                "  -d, --detach    run it in the background and print its pid\n"
                "  --env K=V       set an environment variable (repeatable)\n"
                "  --cwd DIR       the working directory\n"
                "  --user U        run as user U: a name or uid, optionally :GROUP\n"
                "  --timeout SECS  kill the command after SECS seconds (not with -d)\n"
                "  --stdin         send all of our stdin to the command (UTF-8 text only,\n"
                "                  at most 16 MiB, with -d 256 KiB; the command starts once\n"
                "                  it is read)\n"
                "  --code CODE     run shell code instead of CMD; takes only --timeout (and\n"
                "                  with -d, --tag and --tty)\n"
                "  --tag T         with -d: a tag to show in `ps`\n"
                "  --tty           with -d: run it on a terminal (write to it with the API)\n",
        .opts = "+d|detach,env=,cwd=,user=,timeout=,stdin,code=,tag=,tty",
        .min_args = 1,
        .max_args = -1,
    },
    {
        .name = "shell",
        .section = "Sandboxes",
        .run = cmd_shell,
        .summary = "open an interactive shell in a sandbox",
        .synopsis = "ID [--cmd CMD] [--user U] [--cwd DIR]",
        .help = "Opens a shell on a terminal in the sandbox (bash if it has one, else sh), or\n"
                "runs CMD (a shell command line) on one. Our terminal goes raw for the session,\n"
                "so ^C, ^D and arrow keys reach the sandbox; its size follows ours. The exit\n"
                "status is the remote command's. Without a terminal on stdin, input is passed\n"
                "on as it comes.\n"
                "\n"
                "Options:\n"
                "  --cmd CMD   run the command line CMD instead of a shell\n"
                "  --user U    as user U: a name or uid, optionally :GROUP\n"
                "  --cwd DIR   in the directory DIR\n",
        .opts = "cmd=,user=,cwd=",
        .min_args = 1,
        .max_args = 1,
    },
    {
        .name = "attach",
        .section = "Sandboxes",
        .run = cmd_attach,
        .summary = "attach to an interactive sandbox's main process",
        .synopsis = "ID",
        .help = "Connects our terminal to the console of the main process of a sandbox created\n"
                "with --interactive: its recent output first, then everything it writes; what\n"
                "we type is its input. ^] detaches and leaves it running (exit status 0); when\n"
                "the main process ends, so does attach, with its exit status.\n",
        .min_args = 1,
        .max_args = 1,
    },
    {
        .name = "update",
        .section = "Sandboxes",
        .run = cmd_update,
        .summary = "change a sandbox's label or whether it is public",
        .synopsis = "ID [--label L] [--public | --private]",
        .help = "Changes the label of a sandbox, or whether its declared ports (create --port,\n"
                "else the image's exposed ones) answer without a token (--public) or only to\n"
                "its owner (--private), and prints the change. Other ports are always its\n"
                "owner's.\n"
                "\n"
                "Options:\n"
                "  --label L    the new label (not empty)\n"
                "  --public     its proxy answers anyone on its declared ports\n"
                "  --private    its proxy answers only its owner's token\n",
        .opts = "label=,public,private",
        .min_args = 1,
        .max_args = 1,
    },
    {
        .name = "history",
        .section = "Sandboxes",
        .run = cmd_history,
        .summary = "list a sandbox's executions, or print one's output",
        .synopsis = "ID [--limit N] | ID EID",
        .help = "Lists the executions of a sandbox, newest first: EID, EXIT (- while it runs),\n"
                "STARTED and COMMAND. With EID, prints that execution's recorded output: its\n"
                "stdout on ours and its stderr on ours.\n"
                "\n"
                "Options:\n"
                "  --limit N   at most N executions (default 20)\n",
        .opts = "limit=",
        .min_args = 1,
        .max_args = 2,
    },
    {
        .name = "stats",
        .section = "Sandboxes",
        .run = cmd_stats,
        .summary = "show what a sandbox uses now",
        .synopsis = "ID",
        .help = "Prints the sandbox's CPU time, memory (use, limit, peak), tasks, disk use of its\n"
                "writable layer and network bytes in and out. A hibernated sandbox is not woken:\n"
                "only its disk use is known then (- for the rest).\n",
        .min_args = 1,
        .max_args = 1,
    },
    {
        .name = "events",
        .section = "Sandboxes",
        .run = cmd_events,
        .summary = "follow what happens to your sandboxes",
        .synopsis = "[--since ID]",
        .help = "Follows the events of your sandboxes (created, exec, forked, coalesced, paused,\n"
                "unpaused, hibernated, woken, updated, exited, deleted, process_started,\n"
                "process_deleted) as they happen, one a line; --json prints each event's JSON.\n"
                "The stored ones come first: all of them, or those after --since ID (an\n"
                "event's id, as SSE's Last-Event-ID). Runs until interrupted.\n",
        .opts = "since=",
        .min_args = 0,
        .max_args = 0,
    },
    {
        .name = "logs",
        .section = "Sandboxes",
        .run = cmd_logs,
        .summary = "print the output of a sandbox's main process, or of a background one",
        .synopsis = "ID [--process PID] [-f|--follow]",
        .help = "Prints what the sandbox's main process has written, as raw bytes. The answer\n"
                "is text, so --json changes nothing.\n"
                "\n"
                "With --process PID, the output of the background process PID (see `ps`)\n"
                "instead: its stdout on ours, its stderr on ours, from the oldest byte the\n"
                "sandbox still keeps (1 MiB a process; a note on stderr says what was dropped).\n"
                "With -f it follows until the process ends, and picks up where it was if the\n"
                "stream breaks off (a daemon restart). --json prints the daemon's answers\n"
                "(with -f, the stream's ndjson lines) as they come.\n"
                "\n"
                "Options:\n"
                "  -f, --follow     go on printing as it writes, until it ends\n"
                "  --process PID    a background process's output\n",
        .opts = "f|follow,process=",
        .min_args = 1,
        .max_args = 1,
    },
    {
        .name = "ps",
        .section = "Sandboxes",
        .run = cmd_ps,
        .summary = "list a sandbox's background processes",
        .synopsis = "ID",
        .help = "Lists the background processes of a sandbox (started with `exec -d` or the\n"
                "API), oldest first: PID (in the sandbox), STATUS (running or exited), EXIT\n"
                "(- while it runs; with the signal that ended it), TAG, TTY, STARTED and\n"
                "COMMAND. Ended ones are kept until 64 newer ones ended. With --json, the\n"
                "daemon's answer as it came.\n",
        .min_args = 1,
        .max_args = 1,
    },
    {
        .name = "kill",
        .section = "Sandboxes",
        .run = cmd_kill,
        .summary = "send a background process a signal",
        .synopsis = "ID PID [--signal S]",
        .help = "Sends the signal S (default TERM) to the process group of the background\n"
                "process PID of the sandbox ID, and prints PID. S is a name (TERM, KILL, INT,\n"
                "HUP, USR1..., with or without SIG) or a number 1-64. A process that has\n"
                "ended already is an error (409).\n"
                "\n"
                "Options:\n"
                "  --signal S   the signal (default TERM)\n",
        .opts = "signal=",
        .min_args = 2,
        .max_args = 2,
    },
    {
        .name = "cp",
        .section = "Sandboxes",
        .run = cmd_cp,
        .summary = "copy a file into or out of a sandbox",
        .synopsis = "LOCAL ID:PATH | ID:PATH LOCAL",
        .help = "Copies one regular file between here and the sandbox ID (its id, a unique\n"
                "start of it, or its name), streaming it both ways. PATH is absolute inside\n"
                "the sandbox; an argument is ID:PATH when a ':' comes before any '/' (write\n"
                "./a:b for a local file named a:b).\n"
                "\n"
                "cp LOCAL ID:PATH  writes LOCAL to PATH, making missing directories and\n"
                "                  keeping LOCAL's permission bits; a PATH ending in '/'\n"
                "                  puts it in that directory under LOCAL's name. Prints\n"
                "                  nothing; with --json, the daemon's answer {path, size}.\n"
                "cp ID:PATH LOCAL  writes PATH to LOCAL (into LOCAL under PATH's name when\n"
                "                  LOCAL is a directory; to stdout when LOCAL is -) with\n"
                "                  PATH's permissions less the umask. It goes to a temporary\n"
                "                  file renamed at the end, so a failure leaves nothing\n"
                "                  behind. With --json, the daemon's description of PATH.\n"
                "\n"
                "Directories are not copied yet, either way.\n",
        .min_args = 2,
        .max_args = 2,
    },
    {
        .name = "rm",
        .section = "Sandboxes",
        .run = cmd_rm,
        .summary = "delete sandboxes",
        .synopsis = "ID...",
        .help = "Deletes each sandbox (kills it, removes its container and storage; it stays\n"
                "listed by `ls --all` as terminated) and prints the ids deleted. A failure on\n"
                "one id does not stop the others; the exit status is 1 if any failed.\n",
        .min_args = 1,
        .max_args = -1,
    },
    {
        .name = "files ls",
        .section = "Files",
        .run = cmd_files_ls,
        .summary = "list a directory in a sandbox",
        .synopsis = "ID [PATH]",
        .help = "Lists the directory PATH (default /) inside the sandbox: MODE, TYPE, SIZE,\n"
                "MODIFIED and NAME (directories end in /). Paths are resolved inside the\n"
                "sandbox, never on the host.\n",
        .min_args = 1,
        .max_args = 2,
    },
    {
        .name = "files stat",
        .section = "Files",
        .run = cmd_files_stat,
        .summary = "show what a path in a sandbox is (JSON)",
        .synopsis = "ID PATH",
        .help = "Prints the file object of PATH inside the sandbox: name, path, type, is_dir,\n"
                "size, mode and mtime (and link_target for a symlink).\n",
        .min_args = 2,
        .max_args = 2,
    },
    {
        .name = "files rm",
        .section = "Files",
        .run = cmd_files_rm,
        .summary = "delete a file or directory in a sandbox",
        .synopsis = "ID PATH [--recursive]",
        .help = "Deletes PATH inside the sandbox (a symlink itself, not its target) and prints\n"
                "the path. A directory must be empty unless --recursive is given.\n"
                "\n"
                "Options:\n"
                "  -r, --recursive   also a directory with everything in it\n",
        .opts = "r|recursive",
        .min_args = 2,
        .max_args = 2,
    },
    {
        .name = "fork",
        .section = "Forks",
        .run = cmd_fork,
        .summary = "copy a sandbox into a new child, memory too where it can",
        .synopsis = "ID [--label L] [--hostname H]",
        .help = "Forks the sandbox ID: the child starts as a copy of its files and, where the\n"
                "daemon has CRIU, of its running processes and their memory; the two diverge\n"
                "from then on. A paused sandbox forks too. Prints the child's id on stdout, so\n"
                "that `CHILD=$(sandboxer fork ID)` captures it, and on stderr a note:\n"
                "`forked ID -> CHILD (memory preserved)`, or `(files only: memory not\n"
                "preserved)` when the daemon could only copy files and started the child's\n"
                "main process afresh. A big sandbox may take minutes.\n"
                "\n"
                "Options:\n"
                "  --label L      a label for the child (default: the parent's)\n"
                "  --hostname H   the child's hostname (default: its id's first 12 digits)\n",
        .opts = "label=,hostname=",
        .min_args = 1,
        .max_args = 1,
    },
    {
        .name = "tree",
        .section = "Forks",
        .run = cmd_tree,
        .summary = "show the fork tree a sandbox belongs to",
        .synopsis = "ID",
        .help = "Draws the whole tree of forks that ID belongs to, from its topmost ancestor:\n"
                "each sandbox's id (12 digits), label and status; deleted ones are marked ✗.\n"
                "With --json, the daemon's answer: the drawing as \"tree\" and the same tree\n"
                "as nested objects in \"tree_json\".\n",
        .min_args = 1,
        .max_args = 1,
    },
    {
        .name = "coalesce",
        .section = "Forks",
        .run = cmd_coalesce,
        .summary = "keep one sandbox of a tree, delete the rest of it",
        .synopsis = "PARENT FINAL",
        .help = "Keeps FINAL, a descendant of PARENT, and deletes PARENT and every other\n"
                "sandbox under it: the branch that worked survives, the experiments go. FINAL\n"
                "becomes a root (no parent). Prints the daemon's message on stderr and the ids\n"
                "of the deleted sandboxes on stdout, one per line.\n",
        .min_args = 2,
        .max_args = 2,
    },
    {
        .name = "pause",
        .section = "Pausing and hibernating",
        .run = cmd_pause,
        .summary = "freeze sandboxes in memory",
        .synopsis = "ID...",
        .help = "Freezes every process of each sandbox where it stands (cgroup freezer); it\n"
                "holds its memory but uses no CPU, and exec is refused until `unpause`.\n"
                "Prints `ID status` for each. A failure on one id does not stop the others;\n"
                "the exit status is 1 if any failed.\n",
        .min_args = 1,
        .max_args = -1,
    },
    {
        .name = "unpause",
        .section = "Pausing and hibernating",
        .run = cmd_unpause,
        .summary = "thaw paused sandboxes",
        .synopsis = "ID...",
        .help = "Lets the processes of each paused sandbox run on. Prints `ID status` for\n"
                "each. A failure on one id does not stop the others; the exit status is 1 if\n"
                "any failed.\n",
        .min_args = 1,
        .max_args = -1,
    },
    {
        .name = "hibernate",
        .section = "Pausing and hibernating",
        .run = cmd_hibernate,
        .summary = "checkpoint sandboxes to disk, freeing their memory",
        .synopsis = "ID...",
        .help = "Checkpoints each sandbox (its processes and memory) to disk and stops it, so\n"
                "that it holds no memory until `wake`, or an exec, restores it where it was.\n"
                "Prints `ID status` for each. A big sandbox may take minutes. A failure on\n"
                "one id does not stop the others; the exit status is 1 if any failed.\n",
        .min_args = 1,
        .max_args = -1,
    },
    {
        .name = "wake",
        .section = "Pausing and hibernating",
        .run = cmd_wake,
        .summary = "restore hibernated sandboxes",
        .synopsis = "[--cold] ID...",
        .opts = "cold",
        .help = "Restores each hibernated sandbox from its checkpoint: its processes go on\n"
                "from where they stood. Prints `ID status` for each. When the memory cannot\n"
                "be restored the sandbox starts again from its files (its main process\n"
                "afresh), and the line says so; --cold asks for that start directly. A\n"
                "failure on one id does not stop the others; the exit status is 1 if any\n"
                "failed.\n",
        .min_args = 1,
        .max_args = -1,
    },
    {
        .name = "snapshot create",
        .section = "Snapshots",
        .run = cmd_snapshot_create,
        .summary = "keep a sandbox's files and memory as a named snapshot",
        .synopsis = "ID NAME",
        .help = "Checkpoints the sandbox ID (which goes on running) and keeps its files and,\n"
                "where the daemon has CRIU, its memory as your snapshot NAME; start sandboxes\n"
                "from it with `sandboxer create --snapshot NAME`. Prints NAME on stdout and a\n"
                "note on stderr saying whether memory was kept. A big sandbox may take\n"
                "minutes.\n",
        .min_args = 2,
        .max_args = 2,
    },
    {
        .name = "snapshot ls",
        .section = "Snapshots",
        .run = cmd_snapshot_ls,
        .summary = "list your snapshots",
        .synopsis = "",
        .help = "Lists your snapshots: NAME, SOURCE (the sandbox it was taken of, 12 digits),\n"
                "IMAGE, MEMORY (yes if processes and memory were kept, no if files only) and\n"
                "CREATED (local time).\n",
    },
    {
        .name = "snapshot rm",
        .section = "Snapshots",
        .run = cmd_snapshot_rm,
        .summary = "delete snapshots",
        .synopsis = "NAME...",
        .help = "Deletes each snapshot with its files and prints the names deleted; sandboxes\n"
                "started from it are not affected. A failure on one name does not stop the\n"
                "others; the exit status is 1 if any failed.\n",
        .min_args = 1,
        .max_args = -1,
    },
    {
        .name = "template build",
        .section = "Templates",
        .run = cmd_template_build,
        .summary = "build a template from a Dockerfile",
        .synopsis = "[-f DOCKERFILE] NAME [CONTEXT]",
        .help = "Builds the template NAME from DOCKERFILE (default: CONTEXT/Dockerfile) on the\n"
                "daemon with buildah, sending the files under the directory CONTEXT (at most\n"
                "1000 files, 12 MB) for its COPY and ADD lines. FROM names a template (base,\n"
                "code-interpreter or one of yours). RUN steps have no network unless an admin\n"
                "asks for it with --network. The build's log goes to stderr as it comes; NAME\n"
                "goes to stdout when the template is ready (a failed build leaves none). Start\n"
                "sandboxes from it with `sandboxer create NAME`.\n"
                "\n"
                "Options:\n"
                "  -f, --file PATH  the Dockerfile\n"
                "  --pool N         keep N sandboxes of it started ahead (a warm pool)\n"
                "  --global         (admins) a template every user sees\n"
                "  --network        (admins) RUN steps share the host's network\n",
        .opts = "f|file=,pool=,global,network",
        .min_args = 1,
        .max_args = 2,
    },
    {
        .name = "template ls",
        .section = "Templates",
        .run = cmd_template_ls,
        .summary = "list the templates you can start sandboxes from",
        .synopsis = "",
        .help = "Lists the templates you see: yours and the global ones (the built-in base and\n"
                "code-interpreter among them). NAME, SOURCE (builtin, dockerfile or snapshot),\n"
                "GLOBAL, POOL (sandboxes ready / the pool's size) and CREATED (local time).\n",
    },
    {
        .name = "template rm",
        .section = "Templates",
        .run = cmd_template_rm,
        .summary = "delete templates",
        .synopsis = "NAME...",
        .help = "Deletes each of your templates (admins: global ones too; built-in ones never),\n"
                "with its warm pool, and prints the names deleted. Sandboxes started from it\n"
                "are not affected. The exit status is 1 if any failed.\n",
        .min_args = 1,
        .max_args = -1,
    },
    {
        .name = "template pool",
        .section = "Templates",
        .run = cmd_template_pool,
        .summary = "set how many sandboxes a template keeps started ahead",
        .synopsis = "NAME N",
        .help = "Sets the warm pool of the template NAME to N sandboxes (0-8; 0 empties it).\n"
                "The pool fills in the background: a create from NAME then answers at once\n"
                "with a running sandbox. Global templates' pools are set by admins.\n",
        .min_args = 2,
        .max_args = 2,
    },
    {
        .name = "image pull",
        .section = "Images",
        .run = cmd_image_pull,
        .summary = "pull an image into the daemon's store",
        .synopsis = "REF",
        .help = "Pulls REF (e.g. busybox, python:3.12-slim, ghcr.io/owner/name:tag) and prints\n"
                "the reference as stored on stdout; its digest and size go to stderr. A large\n"
                "image may take minutes.\n",
        .min_args = 1,
        .max_args = 1,
    },
    {
        .name = "image import",
        .section = "Images",
        .run = cmd_image_import,
        .summary = "import an OCI layout or archive (admins; a path on the daemon's host)",
        .synopsis = "PATH [--name REF]",
        .help = "Imports an OCI image layout directory, an OCI archive or a docker-archive tar\n"
                "into the daemon's store. The daemon reads PATH itself, so it must be on the\n"
                "daemon's machine. --name stores it under REF (default: the name inside).\n",
        .opts = "name=",
        .min_args = 1,
        .max_args = 1,
    },
    {
        .name = "image ls",
        .section = "Images",
        .run = cmd_image_ls,
        .summary = "list the daemon's images",
        .synopsis = "",
        .help = "Lists the images in the daemon's store: REF, DIGEST (12 digits), SIZE and\n"
                "PULLED (local time).\n",
    },
    {
        .name = "image rm",
        .section = "Images",
        .run = cmd_image_rm,
        .summary = "remove images from the daemon's store",
        .synopsis = "REF...",
        .help = "Removes each image (admins only; refused while a sandbox uses it) and prints\n"
                "the references removed. A failure on one does not stop the others; the exit\n"
                "status is 1 if any failed.\n",
        .min_args = 1,
        .max_args = -1,
    },
    {
        .name = "whoami",
        .section = "Users and tokens",
        .run = cmd_whoami,
        .summary = "show the user and the token in use",
        .synopsis = "",
        .help = "Prints the user the token belongs to, whether it is an admin, and the\n"
                "token's id and name (GET /auth/me).\n",
    },
    {
        .name = "token create",
        .section = "Users and tokens",
        .run = cmd_token_create,
        .summary = "create an API token (shown once)",
        .synopsis = "[--name NAME] [--user USER] [--admin] [--save]",
        .help = "Creates an API token and prints only the secret on stdout, so that\n"
                "`T=$(sandboxer token create)` captures it; a note goes to stderr. The secret\n"
                "is shown once: the daemon keeps only its hash.\n"
                "\n"
                "Options:\n"
                "  --name NAME   a label for the token, e.g. the machine it is for\n"
                "  --user USER   (admins) a token for USER, who is created if new\n"
                "  --admin       (admins) with --user: make the new user an admin\n"
                "  --save        also write the token to the token file (mode 0600):\n"
                "                $XDG_CONFIG_HOME/sandboxer/token or ~/.config/sandboxer/token\n",
        .opts = "name=,user=,admin,save",
    },
    {
        .name = "token ls",
        .section = "Users and tokens",
        .run = cmd_token_ls,
        .summary = "list API tokens",
        .synopsis = "[--user USER | --all]",
        .help = "Lists your tokens: ID, NAME, USER, CREATED, LAST USED (local time).\n"
                "\n"
                "Options:\n"
                "  --user USER   (admins) the tokens of USER\n"
                "  --all         (admins) every user's tokens\n",
        .opts = "user=,all",
    },
    {
        .name = "token rm",
        .section = "Users and tokens",
        .run = cmd_token_rm,
        .summary = "revoke API tokens",
        .synopsis = "ID...",
        .help = "Revokes each token by id (tok_…) and prints the ids revoked. Admins may\n"
                "revoke anyone's token. A failure on one id does not stop the others; the\n"
                "exit status is 1 if any failed.\n",
        .min_args = 1,
        .max_args = -1,
    },
    {
        .name = "completion",
        .section = "The daemon",
        .run = cmd_completion,
        .summary = "print the bash completion script",
        .synopsis = "bash",
        .help = "Prints a bash completion script for sandboxer's verbs and options. Load it\n"
                "with `source <(sandboxer completion bash)`, e.g. from ~/.bashrc, or install\n"
                "it as /etc/bash_completion.d/sandboxer.\n",
        .min_args = 1,
        .max_args = 1,
    },
    {
        .name = "serve",
        .section = "The daemon",
        .summary = "run the daemon; see `sandboxer serve --help`",
        .synopsis = "[OPTIONS]",
        .help = "Runs the daemon. It is not a client command: see `sandboxer serve --help`.\n",
    },
    {
        .name = "doctor",
        .section = "The daemon",
        .run = cmd_doctor,
        .summary = "check this host for a sandbox server, and fix its sysctls",
        .synopsis = "[--fix] [--short] [--state-dir DIR] [--timeout SECS] [CHECK...]",
        .help = "Checks the machine it runs on (as root; no daemon needed) and prints a table:\n"
                "each check's status, how much it matters, what was found and, where it falls\n"
                "short, the fix. Required (the daemon cannot run sandboxes without it): root,\n"
                "the kernel version, cgroup controllers, runc, overlayfs on the state dir.\n"
                "Recommended (a feature or a hardening is missing): cgroup v2, favordynmods,\n"
                "CRIU and our CRIU build, overlay index/nfs_export, disk quotas, user\n"
                "namespaces and idmapped mounts, and sysctls: kernel.dmesg_restrict,\n"
                "kernel.kptr_restrict, kernel.unprivileged_bpf_disabled,\n"
                "kernel.perf_event_paranoid, fs.protected_{symlinks,hardlinks,fifos,regular}.\n"
                "Optional: /dev/kvm, runsc and its ptrace and kvm platforms (each probe is\n"
                "killed after --timeout: runsc --platform=kvm hangs on a nested VM).\n"
                "CHECK names limit the run to those checks (and --fix to their sysctls).\n"
                "\n"
                "The exit status is 1 when a required check fails (or --fix could not set a\n"
                "sysctl), else 0; --json prints the checks as JSON.\n"
                "\n"
                "Options:\n"
                "  --fix            set the recommended sysctls that are off, now and in\n"
                "                   /etc/sysctl.d/90-sandboxer.conf (asks nothing; prints what\n"
                "                   it changed)\n"
                "  --short          one summary line, without the runsc platform probes (what\n"
                "                   `make run` prints)\n"
                "  --state-dir DIR  the daemon's state dir, where quotas and overlayfs are\n"
                "                   probed (default $SANDBOXER_STATE_DIR or /var/lib/sandboxer)\n"
                "  --timeout SECS   how long each tool and probe may take (default 5)\n",
        .opts = "fix,short,state-dir=,timeout=",
        .min_args = 0,
        .max_args = -1,
    },
    {
        .name = "version",
        .section = "The daemon",
        .run = cmd_version,
        .summary = "print the client's and the server's versions",
        .synopsis = "",
        .help = "Prints `sandboxer <version>` and, when the daemon answers GET /healthz,\n"
                "`server <version>`. An unreachable daemon is noted on stderr, not an error.\n"
                "With --json: {\"client\": \"…\", \"server\": \"…\" or null}.\n",
    },
    {
        .name = "caddy-config",
        .section = "The daemon",
        .run = cmd_caddy_config,
        .summary = "print a Caddyfile for HTTPS and per-sandbox subdomains",
        .synopsis = "--vhost DOMAIN [--upstream HOST:PORT] [--email E] [--dns-provider NAME]\n"
                    "            [--https-port N] | --e2b DOMAIN [--upstream HOST:PORT] "
                    "[--https-port N]",
        .help = "Prints a Caddyfile that serves DOMAIN and *.DOMAIN over HTTPS (certificates\n"
                "from the ACME DNS challenge) and forwards to the daemon, which must run with\n"
                "--vhost DOMAIN: <name>.DOMAIN and <name>-<port>.DOMAIN reach that sandbox's\n"
                "proxy. The DNS provider's Caddy module must be built in (see the comment).\n"
                "With --e2b DOMAIN instead: api.DOMAIN and *.DOMAIN for E2B's SDKs\n"
                "(E2B_DOMAIN=DOMAIN; the daemon runs with --e2b-domain DOMAIN), certificates\n"
                "from Caddy's local CA (tls internal; docs/e2b.md). Talks to no daemon.\n",
        .opts = "vhost=,e2b=,upstream=,email=,dns-provider=,https-port=",
        .min_args = 0,
        .max_args = 0,
    },
};

static const char overview_intro[] =
    "Usage: sandboxer [OPTIONS] COMMAND [ARGS...]\n"
    "\n"
    "Sandboxer runs code in isolated Linux sandboxes made from OCI images, and can fork,\n"
    "hibernate and wake them. This is its command-line client: it talks to the daemon's\n"
    "HTTP API over a unix socket (by default) or TCP.\n"
    "\n"
    "A sandbox is named by its id, a unique start of it (as `ls` shows), or its name.\n"
    "A fork copies a running sandbox, its processes' memory too where the daemon can;\n"
    "forks of forks make a tree, which `coalesce` prunes to the branch you keep.\n";

static const char overview_options[] =
    "\n"
    "Options (before the command; --json also after it):\n"
    "  --url URL       talk to the daemon at URL (http[s]://HOST:PORT, or unix:/PATH)\n"
    "  --socket PATH   the daemon's unix socket (default " CLIENT_DEFAULT_SOCKET ")\n"
    "  --token TOKEN   the API token to send\n"
    "  --json          print the server's JSON as it came, for scripts\n"
    "  -h, --help      show this help (`sandboxer COMMAND --help` for a command)\n"
    "  --version       print the client's version\n"
    "\n"
    "Environment:\n"
    "  SANDBOXER_URL     like --url\n"
    "  SANDBOXER_SOCKET  like --socket\n"
    "  SANDBOXER_TOKEN   like --token\n"
    "Options beat the environment. Without either, the token is the first line of\n"
    "$XDG_CONFIG_HOME/sandboxer/token or ~/.config/sandboxer/token (`token create --save`).\n"
    "\n"
    "Exit status: 0 on success, 1 when the daemon reports an error or cannot be reached,\n"
    "2 on a usage error; `exec`, `shell` and `attach` pass on the command's own status.\n";

const struct cli_verb *cli_verb_table(size_t *n)
{
    *n = ARRAY_SIZE(verbs);
    return verbs;
}

#define NAME_WIDTH 16 /* the column of verb names in the overview and group help */

/* The verbs under a heading per section, in the order of the table. */
static void print_overview(FILE *out)
{
    const char *section = NULL;
    fputs(overview_intro, out);
    for (size_t i = 0; i < ARRAY_SIZE(verbs); i++) {
        if (!section || strcmp(section, verbs[i].section) != 0)
            fprintf(out, "\n%s:\n", verbs[i].section);
        section = verbs[i].section;
        fprintf(out, "  %-*s %s\n", NAME_WIDTH, verbs[i].name, verbs[i].summary);
    }
    fputs(overview_options, out);
}

static void print_usage(const struct cli_verb *v, FILE *out)
{
    fprintf(out, "Usage: sandboxer %s%s%s\n\n", v->name, *v->synopsis ? " " : "", v->synopsis);
    fprintf(out, "%s", v->help);
    if (v->run)
        fputs("\nCommon options:\n"
              "  --json        print the server's JSON as it came\n"
              "  -h, --help    show this help\n",
              out);
}

/* True if the verb's name is the first words of argv; *nwords says how many it took. */
static bool name_matches(const char *name, int argc, char **argv, int *nwords)
{
    int n = 0;
    while (*name) {
        size_t len = strcspn(name, " ");
        if (n >= argc || strlen(argv[n]) != len || strncmp(argv[n], name, len) != 0)
            return false;
        name += len + (name[len] == ' ');
        n++;
    }
    *nwords = n;
    return true;
}

static const struct cli_verb *find_verb(int argc, char **argv, int *nwords)
{
    for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
        if (name_matches(verbs[i].name, argc, argv, nwords))
            return &verbs[i];
    return NULL;
}

/* True if word names a group of verbs ("token" for "token create", …). */
static bool is_group(const char *word)
{
    size_t len = strlen(word);
    for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
        if (strncmp(verbs[i].name, word, len) == 0 && verbs[i].name[len] == ' ')
            return true;
    return false;
}

static void print_group(const char *group, FILE *out)
{
    size_t len = strlen(group);
    fprintf(out, "Usage: sandboxer %s COMMAND [ARGS...]\n\nCommands:\n", group);
    for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
        if (strncmp(verbs[i].name, group, len) == 0 && verbs[i].name[len] == ' ')
            fprintf(out, "  %-*s %s\n", NAME_WIDTH, verbs[i].name, verbs[i].summary);
    fprintf(out, "\nRun 'sandboxer %s COMMAND --help' for a command's usage.\n", group);
}

/* `sandboxer token`, `sandboxer token --help`, `sandboxer token bogus`. */
static int group_help(const char *group, const char *next, err_t *err)
{
    if (next && (strcmp(next, "--help") == 0 || strcmp(next, "-h") == 0)) {
        print_group(group, stdout);
        return CLI_EXIT_OK;
    }
    if (next)
        return cli_usage(err, "unknown command '%s %s'", group, next);
    print_group(group, stderr);
    return CLI_EXIT_USAGE;
}

/* `sandboxer help [COMMAND...]`. */
static int help_verb(int argc, char **argv, err_t *err)
{
    int nwords = 0;
    const struct cli_verb *v = argc > 0 ? find_verb(argc, argv, &nwords) : NULL;
    if (argc == 0) {
        print_overview(stdout);
    } else if (v && nwords == argc) {
        print_usage(v, stdout);
    } else if (argc == 1 && is_group(argv[0])) {
        print_group(argv[0], stdout);
    } else {
        return cli_usage(err, "no help for '%s'", argv[0]);
    }
    return CLI_EXIT_OK;
}

static int run_verb(cli_t *cli, const struct cli_verb *v, int argc, char **argv, err_t *err)
{
    _cleanup_args_ cli_args_t *args = NULL;
    bool help = false;
    cli->verb = v;
    if (cli_args_parse(cli, v, argc, argv, &args, &help, err) < 0)
        return -1;
    if (help) {
        print_usage(v, stdout);
        return CLI_EXIT_OK;
    }
    if (!v->run)
        return cli_usage(err, "'%s' is not a client command; see `sandboxer %s --help`", v->name,
                         v->name);
    return v->run(cli, args, err);
}

static int dispatch(cli_t *cli, int argc, char **argv, err_t *err)
{
    int nwords = 0;
    const struct cli_verb *v = find_verb(argc, argv, &nwords);
    if (v)
        return run_verb(cli, v, argc - nwords, argv + nwords, err);
    if (strcmp(argv[0], "help") == 0)
        return help_verb(argc - 1, argv + 1, err);
    if (is_group(argv[0]))
        return group_help(argv[0], argc > 1 ? argv[1] : NULL, err);
    return cli_usage(err, "unknown command '%s'", argv[0]);
}

/* Global options that take a value, and the member of cli_t it goes to. */
static const struct {
    const char *name;
    size_t offset;
} global_values[] = {
    {"--url", offsetof(cli_t, url)},
    {"--socket", offsetof(cli_t, socket)},
    {"--token", offsetof(cli_t, token)},
};

/* --url URL, --url=URL and the like at argv[*i]; anything else is an unknown option. */
static int global_value(cli_t *cli, int argc, char **argv, int *i, err_t *err)
{
    const char *w = argv[*i];
    for (size_t g = 0; g < ARRAY_SIZE(global_values); g++) {
        const char *name = global_values[g].name;
        size_t len = strlen(name);
        if (strncmp(w, name, len) != 0 || (w[len] != '\0' && w[len] != '='))
            continue;
        const char *value = w[len] == '=' ? w + len + 1 : *i + 1 < argc ? argv[++*i] : NULL;
        if (!value || !*value)
            return cli_usage(err, "option %s needs a value", name);
        *(const char **)((char *)cli + global_values[g].offset) = value;
        return 0;
    }
    return cli_usage(err, "unknown option '%s'", w);
}

/* The options before the verb; *i ends at the verb. 1: help or version printed, stop. */
static int parse_globals(cli_t *cli, int argc, char **argv, int *i, err_t *err)
{
    for (*i = 1; *i < argc && argv[*i][0] == '-'; (*i)++) {
        const char *w = argv[*i];
        if (strcmp(w, "--") == 0) {
            (*i)++;
            break;
        } else if (strcmp(w, "--json") == 0) {
            cli->json = true;
        } else if (strcmp(w, "-h") == 0 || strcmp(w, "--help") == 0) {
            print_overview(stdout);
            return 1;
        } else if (strcmp(w, "--version") == 0) {
            printf("sandboxer %s\n", SANDBOXER_VERSION);
            return 1;
        } else if (global_value(cli, argc, argv, i, err) < 0) {
            return -1;
        }
    }
    return 0;
}

static int run(cli_t *cli, int argc, char **argv, err_t *err)
{
    int i;
    int r = parse_globals(cli, argc, argv, &i, err);
    if (r != 0)
        return r < 0 ? -1 : CLI_EXIT_OK;
    if (i >= argc) {
        print_overview(stderr);
        return CLI_EXIT_USAGE;
    }
    return dispatch(cli, argc - i, argv + i, err);
}

int cli_main(int argc, char **argv)
{
    cli_t cli = {0};
    err_t err = {0};
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "sandboxer: cannot initialise libcurl\n");
        return CLI_EXIT_FAIL;
    }
    int rc = run(&cli, argc, argv, &err);
    if (rc < 0) {
        cli_print_error(&cli, &err);
        bool usage = strcmp(err.code, "usage") == 0 || strcmp(err.code, "config") == 0;
        rc = usage ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    client_free(cli.client);
    curl_global_cleanup();
    return rc;
}
