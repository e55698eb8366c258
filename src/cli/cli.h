/* The command-line client: `sandboxer <verb> …` as a client of the daemon's HTTP API. */
#pragma once

/* Run the client; argv[0] is the program name, argv[1] the verb (or a global option).
 * Returns the process exit status: 0 success, 1 failure, 2 usage error. */
int cli_main(int argc, char **argv);
