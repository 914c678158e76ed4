# exchange/xp_machines.awk — writes exchange/xp_topo_builtin.c (the table of
# built-in machines) from topologies/*.topo at build time:
#
#   LC_ALL=C awk -f exchange/xp_machines.awk topologies/*.topo > xp_topo_builtin.c
#
# One file is one machine, one row of `xp_machines` (exchange/xp_topo.h):
# its whole text is the built-in topology (the parser reads `#@` lines as
# the comments they are), and its `#@` lines are the rest of the row:
#
#   #@ detect H100 GH100           CUDA device-name substrings that pick this
#                                  machine's figures (the longest match wins)
#   #@ pcie 63 GB/s PCIe Gen5 x16  the host link of its GPUs: a rate (GB/s,
#                                  TB/s, MB/s) or `shared` (the text's own
#                                  `shared pcie`), then its name
#   #@ detect-mesh                 also detected when 8 GPUs' peer matrix is
#                                  this machine's link adjacency
#   #@ detect-fallback             its figures serve unknown GPUs (exactly
#                                  one machine says so)
#   #@ hosts 50 GB/s 10 us 8 x ConnectX-7 400 Gb/s
#                                  `Nx-NAME` is built in: NIC per GPU, alpha
#                                  between hosts, then what the NICs are
#   #@ cal STATEMENT               one line of the calibration table that the
#                                  text's `calibration` statement names
#                                  (coordinator/predict/co_calib.h); without
#                                  `#@ cal` lines, topologies/NAME.cal is
#                                  that table when it exists
#
# Anything else after `#@` stops the build with FILE:LINE and the word; the
# file's name must be NAME.topo for its `name NAME`. Output is the same for
# the same files (the caller sorts them: LC_ALL=C).
function fail(msg) {
    printf "%s:%d: %s\n", FILENAME, FNR, msg > "/dev/stderr"
    failed = 1
    exit 1
}
function esc(s,    o, i, c) {  # a C string literal's body (mawk's gsub is no help)
    o = ""
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "\\" || c == "\"")
            o = o "\\"
        o = o c
    }
    return o
}
function cstr(s) { return "\"" esc(s) "\\n\"" }
function cq(s) { return "\"" esc(s) "\"" }
function rest(from,    s, i) {
    s = $from
    for (i = from + 1; i <= NF; i++)
        s = s " " $i
    return s
}
function rate(num, unit) {
    if (num !~ /^[0-9]+(\.[0-9]+)?$/)
        fail("bad rate '" num "'")
    if (unit == "TB/s") return num "e12"
    if (unit == "GB/s") return num "e9"
    if (unit == "MB/s") return num "e6"
    fail("bad rate unit '" unit "' (TB/s, GB/s or MB/s)")
}
FNR == 1 {
    n++
    base = FILENAME
    sub(/.*\//, "", base)
    sub(/\.topo$/, "", base)
    file[n] = base
    dir[n] = FILENAME
    sub(/[^\/]*$/, "", dir[n])
    ndet[n] = 0
    ncal[n] = 0
    pcie[n] = ""
    pgen[n] = ""
}
{
    text[n, FNR] = $0
    nline[n] = FNR
}
$1 == "name" { name[n] = $2 }
$1 == "calibration" { calname[n] = $2 }
$1 == "#@" {
    if ($2 == "detect") {
        if (NF < 3)
            fail("'#@ detect' names at least one substring")
        for (i = 3; i <= NF; i++)
            det[n, ++ndet[n]] = $i
    } else if ($2 == "pcie") {
        if ($3 == "shared" && NF >= 4) {
            pcie[n] = "0"
            pgen[n] = rest(4)
        } else if (NF >= 5) {
            pcie[n] = rate($3, $4)
            pgen[n] = rest(5)
        } else
            fail("'#@ pcie' wants RATE UNIT NAME or shared NAME")
    } else if ($2 == "detect-mesh" && NF == 2) {
        mesh[n] = 1
    } else if ($2 == "detect-fallback" && NF == 2) {
        fallback[n] = 1
        nfallback++
    } else if ($2 == "hosts") {
        if (NF < 7)
            fail("'#@ hosts' wants NIC-RATE UNIT LATENCY UNIT WHAT")
        rate($3, $4)
        hnic[n] = $3 " " $4
        hlat[n] = $5 " " $6
        hwhy[n] = rest(7)
    } else if ($2 == "cal") {
        if (NF < 3)
            fail("'#@ cal' wants a statement")
        cal[n, ++ncal[n]] = rest(3)
    } else
        fail("unknown built-in machine statement '" $2 "'")
}
END {
    if (failed)
        exit 1
    if (n == 0) {
        print "xp_machines.awk: no topology files" > "/dev/stderr"
        exit 1
    }
    if (nfallback != 1) {
        printf "xp_machines.awk: %d machines say '#@ detect-fallback' (one must)\n", nfallback > "/dev/stderr"
        exit 1
    }
    for (m = 1; m <= n; m++) {
        if (name[m] != file[m]) {
            printf "xp_machines.awk: %s.topo names itself '%s'\n", file[m], name[m] > "/dev/stderr"
            exit 1
        }
        if (ndet[m] > 0 && pgen[m] == "") {
            printf "xp_machines.awk: %s is detected but has no '#@ pcie'\n", file[m] > "/dev/stderr"
            exit 1
        }
        if (ncal[m] == 0 && calname[m] != "") {
            path = dir[m] calname[m] ".cal"
            while ((getline line < path) > 0)
                cal[m, ++ncal[m]] = line
            close(path)
            calfile[m] = ncal[m] > 0
        }
    }
    print "/* exchange/xp_topo_builtin.c — GENERATED at build time by"
    print " * exchange/xp_machines.awk from the .topo files in topologies/; do not edit. */"
    print "#include <stddef.h>"
    print ""
    print "#include \"exchange/xp_topo.h\""
    for (m = 1; m <= n; m++) {
        print ""
        printf "static const char text_%d[] =\n", m
        for (l = 1; l <= nline[m]; l++)
            printf "    %s%s\n", cstr(text[m, l]), l == nline[m] ? ";" : ""
        printf "static const char *const detect_%d[] = {", m
        for (k = 1; k <= ndet[m]; k++)
            printf "%s, ", cq(det[m, k])
        print "NULL};"
        if (ncal[m] > 0) {
            printf "static const char cal_%d[] =\n", m
            if (!calfile[m])
                printf "    %s\n", cstr("name " calname[m])
            for (k = 1; k <= ncal[m]; k++)
                printf "    %s%s\n", cstr(cal[m, k]), k == ncal[m] ? ";" : ""
        }
    }
    print ""
    print "const xp_machine xp_machines[] = {"
    for (m = 1; m <= n; m++) {
        printf "    {%s, text_%d, detect_%d, %s, %s, %d, %d,\n", cq(name[m]), m, m,
            pgen[m] == "" ? "NULL" : cq(pgen[m]), pcie[m] == "" ? "0" : pcie[m],
            mesh[m] + 0, fallback[m] + 0
        if (hnic[m] != "")
            printf "     %s, %s, %s,\n", cq(hnic[m]), cq(hlat[m]), cq(hwhy[m])
        else
            print "     NULL, NULL, NULL,"
        printf "     %s, %s},\n", calname[m] == "" ? "NULL" : cq(calname[m]),
            (ncal[m] > 0 ? "cal_" m : "NULL")
    }
    print "};"
    printf "const int xp_nmachines = %d;\n", n
    print ""
    printf "const char *const xp_topo_builtin_names[] = {"
    for (m = 1; m <= n; m++)
        printf "\"%s\", ", name[m]
    print "NULL};"
}
