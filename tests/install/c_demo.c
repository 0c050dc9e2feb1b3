/* Built as C against the installed libfedgate-client (tests/integration/client_install.sh): the C
 * header compiles as C and its functions link. Opening an endpoint on a bad gateway address fails
 * before any socket, and the error names the stage. */
#include <fedgate/fedgate.h>
#include <stdio.h>

int main(void) {
    fedgate_error err;
    fedgate_endpoint* ep = fedgate_open("not-an-address", "2.7.42", "198.18.2.10", "tcp", &err);
    printf("%s %s | %s\n", ep == NULL ? "refused" : "opened", fedgate_stage_name(err.stage), err.message);
    return ep == NULL ? 0 : 1;
}
