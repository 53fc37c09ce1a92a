"""GRPO math against values worked out by hand."""

import math

import pytest
import torch

from flywheel.policy.grpo import clipped_pg_loss, decoupled_importance, group_advantages, overlong_penalty, token_weights, zero_variance_groups


def test_group_advantages_by_hand():
    # group a: rewards 1, 0 -> mean .5, std .5 -> +1, -1; group b: all equal -> 0
    adv = group_advantages([1.0, 0.0, 0.3, 0.3], ["a", "a", "b", "b"], eps=1e-12)
    assert adv[0] == pytest.approx(1.0) and adv[1] == pytest.approx(-1.0)
    assert adv[2] == 0.0 and adv[3] == 0.0


def test_group_advantages_three_members():
    # rewards 0, 0, 1: mean 1/3, population std sqrt(2)/3
    adv = group_advantages([0.0, 0.0, 1.0], ["g"] * 3, eps=0.0)
    std = math.sqrt(2) / 3
    assert adv == pytest.approx([-1 / 3 / std, -1 / 3 / std, 2 / 3 / std])


def test_one_huge_infinite_or_nan_reward_leaves_the_rest_of_its_group_finite():
    """Unclipped, 1e200 makes the group's variance overflow and every other advantage 0."""
    rewards = [1e200, 1.0, 0.0, 1.0, float("inf"), 0.0, float("-inf"), float("nan"), 1.0, 0.0]
    groups = ["huge"] * 3 + ["inf"] * 4 + ["nan"] * 3
    adv = group_advantages(rewards, groups)
    assert all(math.isfinite(a) for a in adv)
    assert adv[1] < 0 and adv[2] < adv[1] and adv[0] > 0  # the order survives: 1 beats 0 beside the huge one
    assert adv[5] < 0 and adv[4] > 0 > adv[6]
    assert adv[7] == 0.0 and adv[8] == pytest.approx(1.0, abs=1e-5) and adv[9] == pytest.approx(-1.0, abs=1e-5)
    assert zero_variance_groups([float("nan"), float("nan"), 1e300, 1e301], ["a", "a", "b", "b"]) == {"a", "b"}


def test_zero_variance_groups():
    assert zero_variance_groups([1, 1, 0, 1, 0.5, 0.5], ["a", "a", "b", "b", "c", "c"]) == {"a", "c"}


def test_clipped_loss_by_hand():
    # token 1: ratio e^0 = 1, A = 2 -> -2. token 2: ratio e^0.5 = 1.6487 > 1.2, A = 2:
    # min(1.6487*2, 1.2*2) = 2.4 -> -2.4. token 3 masked out.
    new = torch.tensor([[0.0, 0.5, 9.0]])
    old = torch.tensor([[0.0, 0.0, 0.0]])
    loss, stats = clipped_pg_loss(new, old, torch.tensor([2.0]), torch.tensor([[1, 1, 0]]), 0.2, 0.2)
    assert loss.item() == pytest.approx(-4.4, abs=1e-5)
    assert stats["clip_fraction"] == pytest.approx(0.5)


def test_clipped_loss_negative_advantage_keeps_pessimistic_side():
    # A = -1, ratio e^0.5 = 1.6487: min(-1.6487, -1.2) = -1.6487 -> loss +1.6487 (not clipped)
    loss, _ = clipped_pg_loss(torch.tensor([[0.5]]), torch.tensor([[0.0]]), torch.tensor([-1.0]), torch.tensor([[1]]))
    assert loss.item() == pytest.approx(math.exp(0.5), abs=1e-5)


def test_gradient_pushes_up_positive_advantage():
    new = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, _ = clipped_pg_loss(new, new.detach(), torch.tensor([1.0]), torch.ones(1, 2))
    loss.backward()
    assert (new.grad < 0).all()  # gradient descent raises these logprobs


def test_asymmetric_clip_lets_positive_advantage_grow_further():
    # ratio e^0.2 = 1.221: clipped at 1.2 with eps_high 0.2, not with eps_high 0.28
    args = (torch.tensor([[0.2]]), torch.tensor([[0.0]]), torch.tensor([1.0]), torch.tensor([[1.0]]))
    sym, _ = clipped_pg_loss(*args, clip_low=0.2, clip_high=0.2)
    dapo, _ = clipped_pg_loss(*args, clip_low=0.2, clip_high=0.28)
    assert sym.item() == pytest.approx(-1.2) and dapo.item() == pytest.approx(-math.exp(0.2), abs=1e-6)


def test_token_and_sequence_mean_weights():
    assert token_weights([1, 3], "token_mean") == [0.25, 0.25]  # 4 tokens, each 1/4
    assert token_weights([1, 3], "seq_mean") == [0.5, pytest.approx(1 / 6)]  # each sequence 1/2
    with pytest.raises(ValueError, match="aggregation"):
        token_weights([1], "mean")


def test_kl_penalty_k3_by_hand():
    # new = ref: KL term 0. ref - new = 0.5: exp(0.5) - 0.5 - 1 = 0.148721
    new, old = torch.tensor([[0.0, -0.5]]), torch.tensor([[0.0, -0.5]])
    ref = torch.tensor([[0.0, 0.0]])
    loss, stats = clipped_pg_loss(new, old, torch.tensor([0.0]), torch.ones(1, 2), ref_logprobs=ref, kl_coef=2.0)
    assert stats["kl"] == pytest.approx(math.exp(0.5) - 1.5, abs=1e-6)
    assert loss.item() == pytest.approx(2.0 * (math.exp(0.5) - 1.5), abs=1e-6)


def test_overlong_penalty_by_hand():
    assert overlong_penalty(100, max_tokens=256, buffer=64) == 0.0
    assert overlong_penalty(192, max_tokens=256, buffer=64) == 0.0
    assert overlong_penalty(224, max_tokens=256, buffer=64) == pytest.approx(-0.5)
    assert overlong_penalty(256, max_tokens=256, buffer=64) == -1.0
    assert overlong_penalty(256, max_tokens=256, buffer=0) == 0.0


def test_decoupled_importance_by_hand():
    # row 0 on-policy: unchanged. row 1 stale: behaviour logprobs -1, -3; current -1.5, -1
    # -> weights e^-0.5 = 0.6065 and e^2 = 7.39 capped at 2; clipped against the current
    new = torch.tensor([[-0.7, -0.2], [-1.5, -1.0]], requires_grad=True)
    behaviour = torch.tensor([[-0.5, -0.4], [-1.0, -3.0]])
    old, w = decoupled_importance(new, behaviour, torch.tensor([False, True]), cap=2.0)
    assert old.flatten().tolist() == pytest.approx([-0.5, -0.4, -1.5, -1.0])
    assert w.flatten().tolist() == pytest.approx([1.0, 1.0, math.exp(-0.5), 2.0])
    assert not old.requires_grad and not w.requires_grad


def test_off_policy_gradient_is_the_truncated_is_policy_gradient():
    # stale row, ratio to the proximal policy is 1: d loss / d logp = -w * A per token
    new = torch.tensor([[-1.5, -1.0]], requires_grad=True)
    old, w = decoupled_importance(new, torch.tensor([[-1.0, -3.0]]), torch.tensor([True]), cap=2.0)
    loss, stats = clipped_pg_loss(new, old, torch.tensor([2.0]), torch.ones(1, 2), is_weights=w)
    loss.backward()
    assert new.grad.flatten().tolist() == pytest.approx([-2.0 * math.exp(-0.5), -2.0 * 2.0])
    assert stats["is_weight_mean"] == pytest.approx((math.exp(-0.5) + 2.0) / 2)
    assert stats["clip_fraction"] == 0.0
