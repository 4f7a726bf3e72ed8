#!/usr/bin/perl
# Turns one runtests run (its -junitfile output) into result lines, for suite.sh:
#
#   junit2tsv.pl DIR LIST JUNIT FAILDIR
#
# DIR is the test directory (pt2pt, rma, ...), LIST the testlist runtests was given (the
# entries it was to run, in order), JUNIT its JUnit output. Prints, for each entry of LIST,
#
#   dir/program[ args env]<TAB>np<TAB>status<TAB>seconds<TAB>the LIST line
#
# where status is runtests' own verdict: pass, fail (wrong output or exit status), nobuild
# (the program did not build: runtests counts it as a failure), timeout (a failure that ran into its time limit, as runtests
# itself counts timeouts: runtime within 10 s of the limit), skip (runtests skipped it:
# an xfail entry, a non-strict test under --enable-strictmpi, a memory limit), or notrun
# (runtests stopped before it: a stop file, or more than half the tests timing out).
# The test's name carries its arguments and environment (runtests' own naming, so that
# entries of one program with different arguments stay apart), less this suite's own
# RUCX_SUITE_* settings. For each failure the output that runtests recorded is written to
# FAILDIR/<name>.txt (the name with / and spaces as _).
use strict;
use warnings;

my ($dir, $list, $junit, $faildir) = @ARGV;
die "usage: junit2tsv.pl DIR LIST JUNIT FAILDIR\n" unless defined $faildir;

# The entries of the list, as runtests reads them.
my @entries;
open my $L, '<', $list or die "$list: $!\n";
while (my $line = <$L>) {
    chomp $line;
    (my $e = $line) =~ s/#.*//;
    $e =~ s/^\s+|\s+$//g;
    next if $e eq '' || $e =~ /^!/;
    my @f = split /\s+/, $e;
    my ($prog, $np) = ($f[0], $f[1] // 2);
    $np = 2 if $np !~ /^\d+$/;
    my (@args, @envs);
    for my $kv (@f[2 .. $#f]) {
        push @args, $1 if $kv =~ /^arg=(.*)/;
        push @envs, $1 if $kv =~ /^env=(.*)/;
    }
    push @entries, { prog => $prog, np => $np, qual => qual(@args, @envs), line => $e };
}
close $L;

# The test cases of the JUnit file, in order. A passing test is
#   <testcase name="N - ./dir/prog np args env" time="secs"></testcase>
# a failing one has a <failure> element whose CDATA holds "Timeout: N" and the output
# (lines starting "## "); a skipped one a <skipped> element.
my @cases;
if (open my $J, '<', $junit) {
    local $/;
    my $x = <$J>;
    close $J;
    while ($x =~ m{<testcase name="([^"]*)"(?: time="([^"]*)")?>(.*?)</testcase>}gs) {
        my ($name, $time, $body) = ($1, $2 // '', $3);
        $name =~ s/^\s*\d*\s*-\s*//;
        my @f = split /\s+/, $name;
        my $path = shift(@f) // '';
        my $np = shift(@f) // '';
        $path =~ s{^\./}{};
        (my $prog = $path) =~ s{.*/}{};
        my $c = { prog => $prog, np => $np, qual => qual(@f), time => $time };
        if ($body =~ /<skipped/) {
            $c->{status} = 'skip';
        } elsif ($body =~ /<failure/) {
            my $limit = $body =~ /^\s*Timeout: ([\d.]+)/m ? $1 : 0;
            $c->{status} = ($time ne '' && $limit > 0 && $time >= $limit - 10) ? 'timeout' : 'fail';
            my @out = map { s/^## ?//r } grep { /^##/ } split /\n/, $body;
            $c->{output} = join("\n", @out) . "\n";
            $c->{status} = 'nobuild' if $c->{output} =~ /^Failed to build /m;
        } else {
            $c->{status} = 'pass';
        }
        push @cases, $c;
    }
}

# Match them up in order (runtests writes one case per entry, in the list's order); a case
# that does not fit its entry is looked for further on.
my %seen;
my $ci = 0;
for my $e (@entries) {
    my $id = "$dir/$e->{prog}" . ($e->{qual} ne '' ? " $e->{qual}" : '');
    # Identical entries (same name and np) are told apart by a #n suffix.
    my $n = ++$seen{"$id\t$e->{np}"};
    $id .= " #$n" if $n > 1;
    my ($status, $time) = ('notrun', '');
    for my $k ($ci .. $#cases) {
        my $c = $cases[$k];
        # The next case in order needs only the program's name to agree (a build failure's
        # case carries no np or arguments); one further on, everything.
        if ($c->{prog} eq $e->{prog}
            && ($k == $ci || ($c->{np} eq $e->{np} && $c->{qual} eq $e->{qual}))) {
            ($status, $time) = ($c->{status}, $c->{time});
            if (defined $c->{output}) {
                (my $f = $id) =~ s{[/\s#]+}{_}g;
                $f = substr($f, 0, 150);
                if (open my $O, '>', "$faildir/$f.txt") {
                    my $how = $status eq 'nobuild' ? 'did not build' : "$status after ${time}s";
                    print $O "# $id (np $e->{np}): $how\n# testlist: $e->{line}\n";
                    print $O $c->{output};
                    close $O;
                }
            }
            $ci = $k + 1;
            last;
        }
    }
    $time = sprintf('%.1f', $time) if $time =~ /^[\d.]+$/;
    print join("\t", $id, $e->{np}, $status, $time, $e->{line}), "\n";
}

# A test's qualifier: its arguments and environment, less RUCX_SUITE_* settings.
sub qual { return join ' ', grep { $_ ne '' && !/^RUCX_SUITE_/ } @_ }
