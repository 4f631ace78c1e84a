# SPDX-License-Identifier: MIT
"""scripts/check_cycles.py on small fake trees, so the check itself can fail:

- two files calling each other: exit 1, the cycle and both edges' names;
- a chain a -> b -> c -> a across folders: exit 1, one cycle of three;
- an acyclic tree (a -> b -> c, a -> c): exit 0, no cycle printed;
- the same static function in two files, each calling its own: no edge,
  exit 0; a global (non-static) variable used from another file is an edge;
- names in comments and string literals are not uses, nor is a struct tag
  spelled like a function;
- tests/ and examples/ are not product code: a test calling back into the
  product makes no cycle;
- a name defined non-static in two files is reported, not a crash;
- two headers including each other (one by its own folder, one from the
  root): exit 1, the include cycle and its spellings; includes resolved
  in include/, of missing (system, generated) headers, or in a comment
  tie nothing; without the back edge, exit 0;
- two folders using each other with no cycle between files: core/ calling
  into and including rados/, rados/ calling and including core/: exit 1,
  `core <-> rados` and every include and call that ties it; core/ given a
  callback table instead (as core/batch.h's kv_batch_remote): exit 0;
- a folder cycle of includes alone, and one of calls alone, each exit 1;
- the checkout itself has no cycle of any kind.

Needs no mount (nothing here touches FUSE); skipped (77) without ctags.
Run as `python3 test_check_cycles.py [--kvfs PATH]`: --kvfs is accepted and
ignored, so ctest runs it like every other integration test.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "check_cycles.py")


class CheckCyclesTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="kvfs-cycles-")
        self.addCleanup(shutil.rmtree, self.root)

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(textwrap.dedent(text))

    def check(self):
        r = subprocess.run([sys.executable, SCRIPT, "--root", self.root],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=60)
        return r.returncode, r.stdout

    def test_two_file_cycle(self):
        self.write("core/a.c", """
            int b_fn(int);
            int a_fn(int x) { return x ? b_fn(x - 1) : 0; }
            """)
        self.write("core/b.c", """
            int a_fn(int);
            int b_fn(int x) { return a_fn(x); }
            """)
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("core/a.c <-> core/b.c\n", out)
        self.assertIn("  core/a.c -> core/b.c: b_fn\n", out)
        self.assertIn("  core/b.c -> core/a.c: a_fn\n", out)
        self.assertIn("1 cycle(s)", out)

    def test_three_file_chain(self):
        self.write("core/a.c", "int b_fn(void);\nint a_fn(void) { return b_fn(); }\n")
        self.write("ssd/b.c", "int c_fn(void);\nint b_fn(void) { return c_fn(); }\n")
        self.write("fs/c.c", "int a_fn(void);\nint c_fn(void) { return a_fn() + 1; }\n")
        self.write("gpu/d.c", "int a_fn(void);\nint d_fn(void) { return a_fn(); }\n")
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("core/a.c <-> fs/c.c <-> ssd/b.c\n", out)
        self.assertIn("  core/a.c -> ssd/b.c: b_fn\n", out)
        self.assertIn("  ssd/b.c -> fs/c.c: c_fn\n", out)
        self.assertIn("  fs/c.c -> core/a.c: a_fn\n", out)
        self.assertNotIn("gpu/d.c <->", out)  # calls into the cycle, not part of it
        self.assertNotIn("gpu/d.c", out.split("check_cycles:")[0].replace("\n  ", "|"))
        self.assertIn("1 cycle(s)", out)

    def test_acyclic(self):
        self.write("fs/top.c", """
            int mid_fn(void);
            int low_fn(void);
            int top_fn(void) { return mid_fn() + low_fn(); }
            """)
        self.write("core/mid.c", "int low_fn(void);\nint mid_fn(void) { return low_fn(); }\n")
        self.write("ssd/low.c", "int low_counter;\nint low_fn(void) { return low_counter++; }\n")
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertNotIn("<->", out)
        self.assertIn("no cycle among 3 .c files (3 uses between files)", out)

    def test_same_static_name_no_edge(self):
        self.write("core/a.c", """
            static int helper(void) { return 1; }
            static int shared_state;
            int a_fn(void) { return helper() + shared_state; }
            """)
        self.write("core/b.c", """
            static int helper(void) { return 2; }
            static int shared_state;
            int b_fn(void) { return helper() + shared_state; }
            """)
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertIn("(0 uses between files)", out)

    def test_static_shadows_and_globals_tie(self):
        # b.c has its own static helper, so its call is not a use of a.c's
        # exported one; a.c's use of b.c's global variable is an edge.
        self.write("core/a.c", """
            extern int b_count;
            static struct { int n; } a_private;
            int helper(void) { return b_count + a_private.n; }
            """)
        self.write("core/b.c", """
            int b_count;
            static int helper(void) { return 2; }
            int b_fn(void) { return helper() + a_private_not_a_use; }
            """)
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertIn("(1 uses between files)", out)
        self.write("core/b.c", """
            int b_count;
            int a_private;
            int b_fn(void) { return helper(); }
            """)
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("  core/a.c -> core/b.c: b_count\n", out)
        self.assertIn("  core/b.c -> core/a.c: helper\n", out)
        # a.c's `static struct {...} a_private` is its own: not a use of b.c's
        self.assertNotIn("a_private", out)

    def test_comments_and_strings_are_not_uses(self):
        self.write("core/a.c", """
            int b_fn(void);
            int a_fn(void) { return b_fn(); }
            """)
        self.write("core/b.c", """
            #include <stdio.h>
            /* a_fn() would be a cycle, but this is a comment
               that spans lines: a_fn */
            int b_fn(void)
            {
                // a_fn();
                puts("a_fn()");
                return 'a';
            }
            """)
        rc, out = self.check()
        self.assertEqual(rc, 0, out)

    def test_struct_tag_is_not_a_use(self):
        # `struct usage` names a type, not the function usage() of a.c.
        self.write("core/a.c", """
            struct usage { int n; };
            int b_fn(void);
            int usage(struct usage *u) { return u->n + b_fn(); }
            """)
        self.write("core/b.c", """
            struct usage;
            int b_fn(void) { struct usage *u = 0; return u != 0; }
            """)
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertIn("(1 uses between files)", out)

    def test_tests_and_examples_excluded(self):
        self.write("core/a.c", "int a_fn(void) { return 1; }\n")
        self.write("core/tests/t.c", "int a_fn(void);\nint t_fn(void) { return a_fn(); }\n")
        self.write("examples/e.c", "int a_fn(void);\nint e_fn(void) { return a_fn(); }\n")
        self.write("fs/user.c", "int t_fn(void);\nint e_fn(void);\n"
                   "int u_fn(void) { return t_fn() + e_fn(); }\n")
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertIn("no cycle among 2 .c files (0 uses between files)", out)

    def test_duplicate_definitions_reported(self):
        self.write("core/a.c", "int twice(void) { return 1; }\n")
        self.write("gpu/b.c", "int twice(void) { return 2; }\n")
        self.write("fs/c.c", "int twice(void);\nint c_fn(void) { return twice(); }\n")
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertIn("warning: twice defined non-static in core/a.c, gpu/b.c", out)
        self.assertIn("(2 uses between files)", out)

    def test_include_cycle(self):
        self.write("core/a.h", """
            /* #include "c.h" is a comment, not an include */
            #include <stdio.h>
            #include "b.h"
            #include "core/generated_config.h"
            #include "kvfs/pub.h"
            """)
        self.write("core/b.h", '#include "core/a.h"\n')
        self.write("core/c.h", '#include "a.h"\n')
        self.write("core/a.c", '#include "core/a.h"\nint a_fn(void) { return 0; }\n')
        self.write("include/kvfs/pub.h", "struct pub { int n; };\n")
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("core/a.h <-> core/b.h\n", out)
        self.assertIn('  core/a.h -> core/b.h: #include "b.h"\n', out)
        self.assertIn('  core/b.h -> core/a.h: #include "core/a.h"\n', out)
        self.assertNotIn("core/c.h <->", out)  # includes the cycle, not part of it
        self.assertIn("check_cycles: 1 cycle(s) among 5 .c and .h files "
                      "(5 includes between files)\n", out)
        self.assertIn("no cycle among 1 .c files", out)  # the calls are fine
        self.write("core/b.h", "struct b { int n; };\n")
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertNotIn("<->", out)
        self.assertIn("check_cycles: no cycle among 5 .c and .h files "
                      "(4 includes between files)\n", out)

    def test_folder_cycle(self):
        # No two files call each other, nor include each other: the folders
        # do, core/batch.c using rados/ and rados/shared.c using core/.
        self.write("core/store.h", "int kv_store_lookup(const char *name);\n")
        self.write("core/store.c", """
            #include "core/store.h"
            int kv_store_lookup(const char *name) { return name[0]; }
            """)
        self.write("core/batch.c", """
            #include "core/store.h"
            #include "rados/shared.h"
            int kv_batch_lookup(const char *name)
            {
                return kv_shared_lookup(name) ?: kv_store_lookup(name);
            }
            """)
        self.write("rados/shared.h", "int kv_shared_lookup(const char *name);\n")
        self.write("rados/shared.c", """
            #include "core/store.h"
            #include "rados/shared.h"
            int kv_shared_lookup(const char *name) { return kv_store_lookup(name) > 0; }
            """)
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("no cycle among 3 .c files (3 uses between files)\n", out)
        self.assertIn("no cycle among 5 .c and .h files", out)
        self.assertIn("core <-> rados\n"
                      "  core -> rados:\n"
                      "    core/batch.c -> rados/shared.c: kv_shared_lookup\n"
                      '    core/batch.c: #include "rados/shared.h"\n'
                      "  rados -> core:\n"
                      "    rados/shared.c -> core/store.c: kv_store_lookup\n"
                      '    rados/shared.c: #include "core/store.h"\n', out)
        self.assertIn("check_cycles: 1 cycle(s) among 2 folders (2 uses between folders)\n", out)
        # core/ asks through a table its caller fills: it no longer knows rados/.
        self.write("core/batch.c", """
            #include "core/store.h"
            struct kv_batch_remote { int (*br_lookup)(const char *name); };
            int kv_batch_lookup(const struct kv_batch_remote *r, const char *name)
            {
                return (r->br_lookup ? r->br_lookup(name) : 0) ?: kv_store_lookup(name);
            }
            """)
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertNotIn("<->", out)
        self.assertIn("check_cycles: no cycle among 2 folders (1 uses between folders)\n", out)

    def test_folder_cycle_of_includes_alone(self):
        self.write("fs/fs.h", '#include "core/store.h"\n')
        self.write("core/store.h", "struct kv_store;\n")
        self.write("core/notify.h", '#include "fs/notify.h"\n')
        self.write("fs/notify.h", "struct kv_notify;\n")
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("no cycle among 4 .c and .h files (2 includes between files)\n", out)
        self.assertIn("core <-> fs\n", out)
        self.assertIn('    core/notify.h: #include "fs/notify.h"\n', out)
        self.assertIn('    fs/fs.h: #include "core/store.h"\n', out)
        self.assertIn("1 cycle(s) among 2 folders", out)

    def test_folder_cycle_of_calls_alone(self):
        self.write("core/a.c", "int ssd_b(void);\nint core_a(void) { return ssd_b(); }\n")
        self.write("ssd/b.c", "int ssd_b(void) { return 1; }\n")
        self.write("ssd/c.c", "int core_d(void);\nint ssd_c(void) { return core_d(); }\n")
        self.write("core/d.c", "int core_d(void) { return 2; }\n")
        self.write("gpu/e.c", "int core_a(void);\nint gpu_e(void) { return core_a(); }\n")
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("no cycle among 5 .c files (3 uses between files)\n", out)
        self.assertIn("core <-> ssd\n"
                      "  core -> ssd:\n"
                      "    core/a.c -> ssd/b.c: ssd_b\n"
                      "  ssd -> core:\n"
                      "    ssd/c.c -> core/d.c: core_d\n", out)
        self.assertNotIn("gpu <->", out)  # uses the cycle, not part of it
        self.assertIn("1 cycle(s) among 3 folders (3 uses between folders)", out)

    def test_the_tree_has_no_cycle(self):
        # The checkout itself: its layers call only down (README.md, "Source layout").
        r = subprocess.run([sys.executable, SCRIPT], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn(" .c files (", r.stdout)
        self.assertIn(" .c and .h files (", r.stdout)
        self.assertIn(" folders (", r.stdout)
        self.assertEqual(r.stdout.count("check_cycles: no cycle among "), 3, r.stdout)


def main():
    args = [a for a in sys.argv[1:]]
    if "--kvfs" in args:  # ctest passes the daemon; this test does not need it
        i = args.index("--kvfs")
        del args[i:i + 2]
    if not shutil.which("ctags"):
        print("SKIP: ctags (universal-ctags) not installed")
        sys.exit(77)
    prog = unittest.main(argv=[sys.argv[0]] + args, exit=False)
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
