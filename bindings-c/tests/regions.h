/* Shared-memory regions for the tests: each program makes its regions in a private temporary
 * directory ($TMPDIR, else /tmp) and removes the directory and everything in it at the end.
 * Needs _POSIX_C_SOURCE 200809L, defined before the first #include of the test. */
#ifndef SG_TEST_REGIONS_H
#define SG_TEST_REGIONS_H

#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#error "define _POSIX_C_SOURCE 200809L before any #include"
#endif

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char sg_regions_dir[512];

/* Makes the directory; false (with a message) when it cannot. */
static bool regions_open(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(sg_regions_dir, sizeof sg_regions_dir, "%s/sluicegate-c-test-XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(sg_regions_dir) == NULL) {
    perror("mkdtemp");
    return false;
  }
  return true;
}

/* Writes the store string "shm:DIR/NAME" into buf and returns it; its file is buf + 4. */
static const char *region(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "shm:%s/%s", sg_regions_dir, name);
  return buf;
}

/* Removes every file left in the directory, then the directory. */
static void regions_close(void) {
  DIR *d = opendir(sg_regions_dir);
  if (d) {
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      snprintf(path, sizeof path, "%s/%s", sg_regions_dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(sg_regions_dir);
}

#endif /* SG_TEST_REGIONS_H */
