//! The initial population and the five transactions, on the cell layout of [`super::Layout`].
//!
//! Every function here is deterministic: the population is a function of the sizes and the seed,
//! a transaction's effects a function of the state and its input. Money is in cents; a balance is
//! an `i64` stored in a cell as its two's complement. The transaction logic follows TPC-C 5.11
//! §2.4–2.8 (what each reads and writes, and in which order); outputs that only a terminal would
//! display are folded into the returned [`Outcome`].

use super::input::nurand;
use super::{
    Cells, Input, Selector, Store, Tpcc, TpccError, DISTRICTS, ORDER_HEADER_CELLS, ORDER_LINE_CELLS,
};
use prefixkv_testkit::rng::Rng;

/// What a transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Committed; the value is the transaction's output folded into a number (New-Order's total,
    /// Order-Status' sum of line amounts, Stock-Level's count of low-stock items, …).
    Committed(u64),
    /// Rolled back (a New-Order with an unused item id): no cell changed.
    RolledBack,
}

/// A deterministic 64-bit hash of `key` under `seed`.
fn hash(seed: u64, key: u64) -> u64 {
    Rng::new(seed ^ key.wrapping_mul(0xA24B_AED4_963E_E407)).next_u64()
}

/// A customer's last name (syllable number 0..=999) and first-name code: TPC-C gives the first
/// 1 000 customers of a district the names 0..=999 in order, the others NURand(255, 0, 999).
pub(super) fn customer_names(seed: u64, w: u32, d: u32, c: u32) -> (u16, u32) {
    let key = (w as u64) << 40 | (d as u64) << 32 | c as u64;
    let mut rng = Rng::new(hash(seed, key));
    let last = if c <= 1000 {
        c as u64 - 1
    } else {
        nurand(&mut rng, 255, seed % 256, 0, 999)
    };
    (last as u16, rng.next_u64() as u32)
}

/// The order ids whose orders the population leaves undelivered start here (the last 30 %).
fn first_undelivered(customers: u32) -> u64 {
    customers as u64 - customers as u64 * 3 / 10 + 1
}

/// Write TPC-C's initial state (§4.3.3, scaled as the sizes say) into `cells` (all of them: the
/// state needs no zeroing first). A bulk load, not a transaction.
pub fn populate<C: Cells + ?Sized>(tpcc: &Tpcc, cells: &mut C) {
    let layout = tpcc.layout();
    let config = *tpcc.config();
    let seed = tpcc.seed();
    let mut rng = Rng::new(seed ^ 0x1A0D);
    let set_row = |cells: &mut C, at: usize, values: &[u64]| {
        for (offset, value) in values.iter().enumerate() {
            cells.set(at + offset, *value);
        }
    };
    for i in 1..=config.items {
        let original = rng.chance(1, 10) as u64;
        let row = [
            rng.in_range(100..10_001),
            rng.in_range(1..10_001),
            original,
            rng.next_u64() >> 32,
        ];
        set_row(cells, layout.item(i), &row);
    }
    let customers = config.customers_per_district;
    let undelivered_from = first_undelivered(customers);
    for w in 1..=config.warehouses {
        set_row(
            cells,
            layout.warehouse(w),
            &[30_000_000, rng.below(2_001), rng.next_u64() >> 32, 0],
        );
        for i in 1..=config.items {
            set_row(cells, layout.stock(w, i), &[rng.in_range(10..101), 0, 0, 0]);
        }
        for d in 1..=DISTRICTS {
            let next_o_id = customers as u64 + 1;
            set_row(
                cells,
                layout.district(w, d),
                &[3_000_000, rng.below(2_001), next_o_id, undelivered_from],
            );
            // Orders 1..=customers, one per customer in a random permutation.
            let mut owners: Vec<u32> = (1..=customers).collect();
            for index in (1..owners.len()).rev() {
                owners.swap(index, rng.below(index as u64 + 1) as usize);
            }
            let mut last_order = vec![0u64; customers as usize + 1];
            for (number, &c) in owners.iter().enumerate() {
                let o = number as u64 + 1;
                last_order[c as usize] = o;
                let delivered = o < undelivered_from;
                let count = rng.in_range(5..16);
                let carrier = if delivered { rng.in_range(1..11) } else { 0 };
                let at = layout.order(w, d, o);
                set_row(cells, at, &[o, c as u64, 1, carrier | count << 8 | 1 << 16]);
                for line in 0..count as usize {
                    let item = rng.in_range(1..config.items as u64 + 1);
                    let amount = if delivered {
                        0
                    } else {
                        rng.in_range(1..1_000_000)
                    };
                    set_row(
                        cells,
                        at + ORDER_HEADER_CELLS + line * ORDER_LINE_CELLS,
                        &[item | (w as u64) << 32, 5, amount, delivered as u64],
                    );
                }
            }
            for c in 1..=customers {
                let (last, first) = customer_names(seed, w, d, c);
                let credit = rng.chance(1, 10) as u64;
                let row = [
                    (-1000i64) as u64,
                    1000,
                    1,
                    0,
                    rng.below(5_001),
                    credit | (last as u64) << 8 | (first as u64) << 24,
                    last_order[c as usize],
                    rng.next_u64(),
                ];
                set_row(cells, layout.customer(w, d, c), &row);
            }
        }
    }
    // One HISTORY row per customer (the ring keeps the newest).
    let mut rows = 0u64;
    for w in 1..=config.warehouses {
        for d in 1..=DISTRICTS {
            for c in 1..=customers {
                let customer = c as u64 | (d as u64) << 32 | (w as u64) << 40;
                set_row(
                    cells,
                    layout.history(rows),
                    &[customer, d as u64 | (w as u64) << 8, 1, 1000],
                );
                rows += 1;
            }
        }
    }
    cells.set(layout.history_count(), rows);
}

/// Run the transaction `input` against `store` (for [`Input::Load`], see [`populate`]: it is not
/// a transaction and is refused here).
pub fn execute<S: Store>(tpcc: &Tpcc, store: &mut S, input: &Input) -> Result<Outcome, TpccError> {
    match input {
        Input::Load => Err(TpccError::BadInput(
            "the population is loaded with `populate`, not executed".into(),
        )),
        Input::NewOrder {
            w,
            d,
            c,
            entry_d,
            lines,
        } => new_order(tpcc, store, *w, *d, *c, *entry_d, lines),
        Input::Payment {
            w,
            d,
            c_w,
            c_d,
            customer,
            amount,
            date,
        } => Ok(payment(
            tpcc,
            store,
            (*w, *d),
            (*c_w, *c_d),
            *customer,
            *amount,
            *date,
        )),
        Input::OrderStatus { w, d, customer } => Ok(order_status(tpcc, store, *w, *d, *customer)),
        Input::Delivery { w, carrier, date } => Ok(delivery(tpcc, store, *w, *carrier, *date)),
        Input::StockLevel { w, d, threshold } => Ok(stock_level(tpcc, store, *w, *d, *threshold)),
    }
}

fn new_order<S: Store>(
    tpcc: &Tpcc,
    store: &mut S,
    w: u32,
    d: u32,
    c: u32,
    entry_d: u64,
    lines: &[super::OrderLineInput],
) -> Result<Outcome, TpccError> {
    let layout = tpcc.layout();
    let config = tpcc.config();
    store.begin();
    let w_tax = store.get(layout.warehouse(w) + 1);
    let district = layout.district(w, d);
    let d_tax = store.get(district + 1);
    let o_id = store.get(district + 2);
    let head = store.get(district + 3);
    // The slot of order o_id - order_slots is reused: it must have been delivered.
    if o_id - head >= config.order_slots as u64 {
        store.abort();
        return Err(TpccError::OrderRingFull {
            w,
            d,
            slots: config.order_slots,
        });
    }
    store.set(district + 2, o_id + 1);
    let customer = layout.customer(w, d, c);
    let discount = store.get(customer + 4);
    let all_local = lines.iter().all(|line| line.supply_w == w) as u64;
    let order = layout.order(w, d, o_id);
    store.set_row(
        order,
        &[
            o_id,
            c as u64,
            entry_d,
            (lines.len() as u64) << 8 | all_local << 16,
        ],
    );
    let mut total = 0u64;
    for (number, line) in lines.iter().enumerate() {
        if line.item > config.items {
            // TPC-C 2.4.2.3: an unused item id rolls the whole transaction back.
            store.abort();
            return Ok(Outcome::RolledBack);
        }
        let price = store.get(layout.item(line.item));
        let stock = layout.stock(line.supply_w, line.item);
        let quantity = line.quantity as u64;
        let on_hand = store.get(stock);
        let left = if on_hand >= quantity + 10 {
            on_hand - quantity
        } else {
            on_hand + 91 - quantity
        };
        let row = [
            left,
            store.get(stock + 1) + quantity,
            store.get(stock + 2) + 1,
            store.get(stock + 3) + (line.supply_w != w) as u64,
        ];
        store.set_row(stock, &row);
        let amount = quantity * price;
        store.set_row(
            order + ORDER_HEADER_CELLS + number * ORDER_LINE_CELLS,
            &[
                line.item as u64 | (line.supply_w as u64) << 32,
                quantity,
                amount,
                0,
            ],
        );
        total += amount;
    }
    store.set(customer + 6, o_id);
    store.commit();
    Ok(Outcome::Committed(
        total * (10_000 - discount) * (10_000 + w_tax + d_tax) / 100_000_000,
    ))
}

fn resolve(tpcc: &Tpcc, w: u32, d: u32, selector: Selector) -> u32 {
    match selector {
        Selector::Id(c) => c,
        Selector::LastName(last) => tpcc.customer_by_last_name(w, d, last),
    }
}

fn payment<S: Store>(
    tpcc: &Tpcc,
    store: &mut S,
    (w, d): (u32, u32),
    (c_w, c_d): (u32, u32),
    selector: Selector,
    amount: u64,
    date: u64,
) -> Outcome {
    let layout = tpcc.layout();
    store.begin();
    let warehouse = layout.warehouse(w);
    store.set(warehouse, store.get(warehouse) + amount);
    let district = layout.district(w, d);
    store.set(district, store.get(district) + amount);
    let c = resolve(tpcc, c_w, c_d, selector);
    let customer = layout.customer(c_w, c_d, c);
    let balance = store.get(customer) as i64 - amount as i64;
    let row = [
        balance as u64,
        store.get(customer + 1) + amount,
        store.get(customer + 2) + 1,
    ];
    store.set_row(customer, &row);
    if store.get(customer + 5) & 0xff == 1 {
        // Bad credit: C_DATA gets the payment's ids and amount prepended (here: folded in).
        let entry = c as u64 | (c_d as u64) << 20 | (c_w as u64) << 24 | (d as u64) << 40;
        let data = hash(
            store.get(customer + 7),
            entry ^ amount.rotate_left(48) ^ w as u64,
        );
        store.set(customer + 7, data);
    }
    let rows = store.get(layout.history_count());
    store.set_row(
        layout.history(rows),
        &[
            c as u64 | (c_d as u64) << 32 | (c_w as u64) << 40,
            d as u64 | (w as u64) << 8,
            date,
            amount,
        ],
    );
    store.set(layout.history_count(), rows + 1);
    store.commit();
    Outcome::Committed(balance as u64)
}

fn order_status<S: Store>(
    tpcc: &Tpcc,
    store: &mut S,
    w: u32,
    d: u32,
    selector: Selector,
) -> Outcome {
    let layout = tpcc.layout();
    store.begin();
    let c = resolve(tpcc, w, d, selector);
    let customer = layout.customer(w, d, c);
    let mut result = store.get(customer);
    let o = store.get(customer + 6);
    if o != 0 {
        let order = layout.order(w, d, o);
        // The slot may hold a newer order by now (the ring): then the order is gone.
        if store.get(order) == o {
            let count = (store.get(order + 3) >> 8) & 0xff;
            for line in 0..count as usize {
                let at = order + ORDER_HEADER_CELLS + line * ORDER_LINE_CELLS;
                result = result
                    .wrapping_add(store.get(at + 2))
                    .wrapping_add(store.get(at + 3));
            }
        }
    }
    store.commit();
    Outcome::Committed(result)
}

fn delivery<S: Store>(tpcc: &Tpcc, store: &mut S, w: u32, carrier: u8, date: u64) -> Outcome {
    let layout = tpcc.layout();
    store.begin();
    let mut delivered = 0;
    for d in 1..=DISTRICTS {
        let district = layout.district(w, d);
        let head = store.get(district + 3);
        if head >= store.get(district + 2) {
            continue; // No undelivered order in this district.
        }
        store.set(district + 3, head + 1);
        let order = layout.order(w, d, head);
        let c = store.get(order + 1) as u32;
        let header = store.get(order + 3);
        store.set(order + 3, (header & !0xff) | carrier as u64);
        let mut total = 0u64;
        for line in 0..((header >> 8) & 0xff) as usize {
            let at = order + ORDER_HEADER_CELLS + line * ORDER_LINE_CELLS;
            total += store.get(at + 2);
            store.set(at + 3, date);
        }
        let customer = layout.customer(w, d, c);
        store.set(customer, (store.get(customer) as i64 + total as i64) as u64);
        store.set(customer + 3, store.get(customer + 3) + 1);
        delivered += 1;
    }
    store.commit();
    Outcome::Committed(delivered)
}

fn stock_level<S: Store>(tpcc: &Tpcc, store: &mut S, w: u32, d: u32, threshold: u8) -> Outcome {
    let layout = tpcc.layout();
    store.begin();
    let next = store.get(layout.district(w, d) + 2);
    let mut items = Vec::with_capacity(20 * 15);
    for o in next.saturating_sub(20).max(1)..next {
        let order = layout.order(w, d, o);
        if store.get(order) != o {
            continue;
        }
        for line in 0..((store.get(order + 3) >> 8) & 0xff) as usize {
            let item = store.get(order + ORDER_HEADER_CELLS + line * ORDER_LINE_CELLS) as u32;
            items.push(item);
        }
    }
    items.sort_unstable();
    items.dedup();
    let low = items
        .iter()
        .filter(|&&item| store.get(layout.stock(w, item)) < threshold as u64)
        .count();
    store.commit();
    Outcome::Committed(low as u64)
}

#[cfg(test)]
mod tests {
    use super::super::{Generator, Layout, TpccConfig, WithUndo};
    use super::*;

    fn small() -> TpccConfig {
        TpccConfig {
            warehouses: 2,
            items: 500,
            customers_per_district: 60,
            order_slots: 200,
            history_slots: 300,
        }
    }

    /// TPC-C's consistency conditions 1–4 (on our representation).
    fn check_consistency(tpcc: &Tpcc, cells: &[u64]) {
        let layout: &Layout = tpcc.layout();
        for w in 1..=tpcc.config().warehouses {
            let districts: u64 = (1..=DISTRICTS).map(|d| cells[layout.district(w, d)]).sum();
            // Condition 1 holds from the population on: 300 000.00 = 10 × 30 000.00.
            assert_eq!(cells[layout.warehouse(w)], districts, "W_YTD of {w}");
            for d in 1..=DISTRICTS {
                let district = layout.district(w, d);
                let (next, head) = (cells[district + 2], cells[district + 3]);
                assert!(head <= next);
                let newest = layout.order(w, d, next - 1);
                assert_eq!(cells[newest], next - 1, "newest order of {w}/{d}");
                for o in head..next {
                    let order = layout.order(w, d, o);
                    assert_eq!(cells[order], o);
                    assert_eq!(
                        cells[order + 3] & 0xff,
                        0,
                        "undelivered order {o} has a carrier"
                    );
                }
                if head > 1 {
                    let delivered = layout.order(w, d, head - 1);
                    if cells[delivered] == head - 1 {
                        assert_ne!(cells[delivered + 3] & 0xff, 0);
                    }
                }
                let count = (cells[newest + 3] >> 8) & 0xff;
                assert!((5..=15).contains(&count));
                for line in 0..count as usize {
                    let item = cells[newest + ORDER_HEADER_CELLS + line * ORDER_LINE_CELLS] as u32;
                    assert!(item >= 1 && item <= tpcc.config().items);
                }
            }
        }
    }

    #[test]
    fn the_mix_runs_and_keeps_the_consistency_conditions() {
        let tpcc = Tpcc::new(small(), 42).unwrap();
        let mut cells = vec![0u64; tpcc.layout().cells()];
        populate(&tpcc, cells.as_mut_slice());
        check_consistency(&tpcc, &cells);
        let mut generator = Generator::new(*tpcc.config(), 42);
        let mut store = WithUndo::new(cells.as_mut_slice());
        let mut counts = std::collections::HashMap::new();
        let mut rolled_back = 0;
        for _ in 0..20_000 {
            let input = generator.next_input();
            match execute(&tpcc, &mut store, &input).unwrap() {
                Outcome::Committed(_) => *counts.entry(input.name()).or_insert(0) += 1,
                Outcome::RolledBack => rolled_back += 1,
            }
        }
        drop(store);
        check_consistency(&tpcc, &cells);
        assert!(
            counts["New-Order"] > 8_000 && counts["Payment"] > 8_000,
            "{counts:?}"
        );
        assert!(
            counts["Delivery"] > 500 && counts["Stock-Level"] > 500,
            "{counts:?}"
        );
        assert!((50..400).contains(&rolled_back), "{rolled_back} rollbacks");
    }

    #[test]
    fn a_rolled_back_new_order_changes_nothing() {
        let tpcc = Tpcc::new(small(), 7).unwrap();
        let mut cells = vec![0u64; tpcc.layout().cells()];
        populate(&tpcc, cells.as_mut_slice());
        let before = cells.clone();
        let input = Input::NewOrder {
            w: 1,
            d: 3,
            c: 9,
            entry_d: 5,
            lines: vec![
                super::super::OrderLineInput {
                    item: 17,
                    supply_w: 2,
                    quantity: 4,
                },
                super::super::OrderLineInput {
                    item: tpcc.config().items + 1,
                    supply_w: 1,
                    quantity: 1,
                },
            ],
        };
        let mut store = WithUndo::new(cells.as_mut_slice());
        assert_eq!(execute(&tpcc, &mut store, &input), Ok(Outcome::RolledBack));
        drop(store);
        assert!(cells == before);
    }

    #[test]
    fn inputs_round_trip_and_bad_bytes_are_refused() {
        let config = small();
        let mut generator = Generator::new(config, 3);
        let mut bytes = Vec::new();
        for _ in 0..2_000 {
            let input = generator.next_input();
            input.encode(&mut bytes);
            assert_eq!(Input::decode(&bytes, &config).unwrap(), input);
            // Every strict prefix is refused (no field may be missing).
            assert!(Input::decode(&bytes[..bytes.len() - 1], &config).is_err());
        }
        let mut bytes = Vec::new();
        Input::Delivery {
            w: 3,
            carrier: 1,
            date: 1,
        }
        .encode(&mut bytes);
        let error = Input::decode(&bytes, &config).unwrap_err().to_string();
        assert!(error.contains("warehouse 3 of 2"), "{error}");
    }
}
