#!/usr/bin/perl
# The comparison table of suite.sh:
#
#   compare.pl OUTDIR MPI...
#
# reads OUTDIR/<mpi>-ucx.tsv and OUTDIR/<mpi>-rucx.tsv (lines: name, np, pass|fail|timeout,
# note) for each MPI given, and OUTDIR/<mpi>-<lib>.seconds if there, and prints per MPI: the
# tests passed over UCX 1.13 and over Rucx, the regressions (pass over UCX 1.13, fail or
# timeout over Rucx), the tests that fail over UCX 1.13 as well, those that pass over Rucx
# only, and those that passed only when rerun alone (flaky). Regressions are counted over
# the tests both columns ran. Exits 1 iff there is a regression.
use strict;
use warnings;

my ($out, @mpis) = @ARGV;
die "usage: compare.pl OUTDIR MPI...\n" unless @mpis;
my %label = (ucx => 'UCX 1.13', rucx => 'Rucx', mpich => 'MPICH 4.0.2', openmpi => 'OpenMPI 4.1.4');
my $regressions = 0;

for my $mpi (@mpis) {
    my (%res, %note, %np, @order, %secs);
    for my $lib (qw(ucx rucx)) {
        my $f = "$out/$mpi-$lib.tsv";
        next unless -f $f;
        open my $T, '<', $f or die "$f: $!\n";
        while (<$T>) {
            chomp;
            my ($test, $np, $st, $note) = split /\t/;
            next unless defined $st;
            # A test is its name and np (entries of one program differ in either).
            my $name = "$test\t$np";
            push @order, $name unless exists $np{$name};
            $np{$name} = $np;
            $res{$lib}{$name} = $st;
            $note{$lib}{$name} = $note // '';
        }
        close $T;
        if (open my $S, '<', "$out/$mpi-$lib.seconds") {
            chomp($secs{$lib} = <$S> // '');
            close $S;
        }
    }
    my @libs = grep { $res{$_} } qw(ucx rucx);
    print "=== $label{$mpi}\n";
    unless (@libs) {
        print "  no results in $out\n\n";
        next;
    }
    for my $lib (@libs) {
        my @names = keys %{ $res{$lib} };
        my %n;
        $n{ $res{$lib}{$_} }++ for @names;
        my $flaky = grep { $note{$lib}{$_} =~ /^flaky/ } @names;
        my $time = $secs{$lib} ? sprintf(', %dm%02ds', $secs{$lib} / 60, $secs{$lib} % 60) : '';
        printf "  over %-9s %4d/%-4d passed (%d failed, %d timed out; %d passed only when rerun%s)\n",
            "$label{$lib}:", $n{pass} // 0, scalar @names, $n{fail} // 0, $n{timeout} // 0,
            $flaky, $time;
    }
    my $line = sub {
        my ($name, @libs) = @_;
        my $s = sprintf '    %-58s np %-2s', (split /\t/, $name)[0], $np{$name};
        for my $lib (@libs) {
            my $st = $res{$lib}{$name} // '-';
            my $n = $note{$lib}{$name} // '';
            $s .= sprintf ' %s %s%s', ($lib eq 'ucx' ? 'ucx' : 'rucx'), $st, ($n ne '' ? " ($n)" : '');
        }
        return "$s\n";
    };
    if ($res{ucx} && $res{rucx}) {
        my @both = grep { exists $res{ucx}{$_} && exists $res{rucx}{$_} } @order;
        my @reg = grep { $res{ucx}{$_} eq 'pass' && $res{rucx}{$_} ne 'pass' } @both;
        my @fix = grep { $res{ucx}{$_} ne 'pass' && $res{rucx}{$_} eq 'pass' } @both;
        $regressions += @reg;
        printf "  regressions (pass over UCX 1.13, not over Rucx): %d\n", scalar @reg;
        print $line->($_, 'rucx') for @reg;
        printf "  pass over Rucx only: %d\n", scalar @fix;
        print $line->($_, 'ucx') for @fix;
    }
    for my $lib (@libs) {
        my @flaky = grep { $note{$lib}{$_} =~ /^flaky/ } @order;
        next unless @flaky;
        printf "  passed over %s only when rerun alone: %d\n", $label{$lib}, scalar @flaky;
        print $line->($_, $lib) for @flaky;
    }
    if ($res{ucx}) {
        my @bad = grep { exists $res{ucx}{$_} && $res{ucx}{$_} ne 'pass' } @order;
        printf "  fail over UCX 1.13 too: %d\n", scalar @bad;
        print $line->($_, @libs) for @bad;
    }
    print "\n";
}
exit($regressions ? 1 : 0);
