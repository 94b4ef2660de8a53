"""The runtime straggler run's reading of who won which view
(``bench.experiments.straggler.views_won``, ``won_back``).

A follower's ``Establish`` does not say who won the view: on main at b89014c
the slowed sequencer won back the view change that deposed it, and the table
showed an ordinary view change. These tests need no node process.
"""

from bench.experiments.straggler import views_won, won_back

REGIONS = ("R0", "R1", "R2")
SLOW_US = 2_000_000


def test_views_won_are_the_winners_after_the_slowdown_by_node() -> None:
    events = [
        (1_000_000, "BecomeSequencer", "R1"),  # before the slowdown: not counted
        (3_620_000, "StragglerViewChange", "R1"),
        (4_215_000, "Establish", "R0"),
        (4_214_000, "BecomeSequencer", "R2"),
        (5_000_000, "BecomeSequencer", "R0"),
    ]
    assert views_won(events, SLOW_US, REGIONS) == [(2214.0, 2), (3000.0, 0)]


def test_the_slowed_sequencer_winning_after_its_deposition_is_won_back() -> None:
    won = [(2214.0, 2), (3000.0, 0)]
    assert won_back(won, 2, 1620.0)
    assert not won_back(won, 2, 2500.0)  # it won before the straggler view change
    assert not won_back([(2214.0, 0)], 2, 1620.0)


def test_both_tables_show_fig9a_beside_a_row_and_a_dash_where_the_paper_has_no_bar() -> None:
    from bench.experiments.straggler_sim import fig9a_cells

    assert fig9a_cells("sdpaxos") == ["88K (-28.2%)", "98K (-20.0%)"]
    assert fig9a_cells("multipaxos") == ["24K (-67.2%)", "-"]
    assert fig9a_cells("epaxos") == ["-", "71K (-21.7%)"]
    assert fig9a_cells("nosuch") == ["-", "-"]
