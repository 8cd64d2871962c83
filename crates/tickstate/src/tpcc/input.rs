//! Transaction inputs: what the logical log records (a transaction's parameters, not its
//! effects), their byte encoding, and TPC-C's input generator.
//!
//! Encoding (little-endian): kind u8, then per kind
//! - 0 Load: nothing (the initial population, a function of the sizes and the seed);
//! - 1 New-Order: w u32, d u8, c u32, entry date u64, n u8, n × (item u32, supply w u32, quantity u8);
//! - 2 Payment: w u32, d u8, customer w u32, customer d u8, selector, amount u64, date u64;
//! - 3 Order-Status: w u32, d u8, selector;
//! - 4 Delivery: w u32, carrier u8, date u64;
//! - 5 Stock-Level: w u32, d u8, threshold u8;
//!
//! where a selector is u8 0 + customer id u32, or u8 1 + last name u16. Decoding checks every
//! field against the database's sizes, so a replayed input can never index outside the state.

use super::{TpccConfig, TpccError, DISTRICTS, MAX_ORDER_LINES};
use prefixkv_testkit::rng::Rng;

/// How a Payment or Order-Status names its customer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selector {
    /// By customer id (40 % of the time).
    Id(u32),
    /// By last name (60 %), a syllable number 0..=999.
    LastName(u16),
}

/// One line of a New-Order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderLineInput {
    /// Item id; `items + 1` (an unused id) in the last line of the 1 % of New-Orders that roll
    /// back.
    pub item: u32,
    /// Supplying warehouse (1 % remote).
    pub supply_w: u32,
    /// Quantity, 1..=10.
    pub quantity: u8,
}

/// One transaction's input, or the initial population.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Populate the database (TPC-C's initial state).
    Load,
    /// New-Order (45 %).
    NewOrder {
        /// Warehouse.
        w: u32,
        /// District.
        d: u32,
        /// Customer.
        c: u32,
        /// Entry date (the transaction's number).
        entry_d: u64,
        /// 5..=15 lines.
        lines: Vec<OrderLineInput>,
    },
    /// Payment (43 %).
    Payment {
        /// Warehouse.
        w: u32,
        /// District.
        d: u32,
        /// The customer's warehouse (15 % remote).
        c_w: u32,
        /// The customer's district.
        c_d: u32,
        /// The customer.
        customer: Selector,
        /// Amount in cents, 100..=500 000.
        amount: u64,
        /// Date.
        date: u64,
    },
    /// Order-Status (4 %), read-only.
    OrderStatus {
        /// Warehouse.
        w: u32,
        /// District.
        d: u32,
        /// The customer.
        customer: Selector,
    },
    /// Delivery (4 %): the oldest undelivered order of each district of `w`.
    Delivery {
        /// Warehouse.
        w: u32,
        /// Carrier, 1..=10.
        carrier: u8,
        /// Delivery date.
        date: u64,
    },
    /// Stock-Level (4 %), read-only.
    StockLevel {
        /// Warehouse.
        w: u32,
        /// District.
        d: u32,
        /// Stock threshold, 10..=20.
        threshold: u8,
    },
}

const LOAD: u8 = 0;
const NEW_ORDER: u8 = 1;
const PAYMENT: u8 = 2;
const ORDER_STATUS: u8 = 3;
const DELIVERY: u8 = 4;
const STOCK_LEVEL: u8 = 5;

impl Input {
    /// The transaction's name.
    pub fn name(&self) -> &'static str {
        match self {
            Input::Load => "Load",
            Input::NewOrder { .. } => "New-Order",
            Input::Payment { .. } => "Payment",
            Input::OrderStatus { .. } => "Order-Status",
            Input::Delivery { .. } => "Delivery",
            Input::StockLevel { .. } => "Stock-Level",
        }
    }

    /// Append the encoding to `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        let selector = |out: &mut Vec<u8>, selector: &Selector| match selector {
            Selector::Id(c) => {
                out.push(0);
                out.extend_from_slice(&c.to_le_bytes());
            }
            Selector::LastName(last) => {
                out.push(1);
                out.extend_from_slice(&last.to_le_bytes());
            }
        };
        match self {
            Input::Load => out.push(LOAD),
            Input::NewOrder {
                w,
                d,
                c,
                entry_d,
                lines,
            } => {
                out.push(NEW_ORDER);
                out.extend_from_slice(&w.to_le_bytes());
                out.push(*d as u8);
                out.extend_from_slice(&c.to_le_bytes());
                out.extend_from_slice(&entry_d.to_le_bytes());
                out.push(lines.len() as u8);
                for line in lines {
                    out.extend_from_slice(&line.item.to_le_bytes());
                    out.extend_from_slice(&line.supply_w.to_le_bytes());
                    out.push(line.quantity);
                }
            }
            Input::Payment {
                w,
                d,
                c_w,
                c_d,
                customer,
                amount,
                date,
            } => {
                out.push(PAYMENT);
                out.extend_from_slice(&w.to_le_bytes());
                out.push(*d as u8);
                out.extend_from_slice(&c_w.to_le_bytes());
                out.push(*c_d as u8);
                selector(out, customer);
                out.extend_from_slice(&amount.to_le_bytes());
                out.extend_from_slice(&date.to_le_bytes());
            }
            Input::OrderStatus { w, d, customer } => {
                out.push(ORDER_STATUS);
                out.extend_from_slice(&w.to_le_bytes());
                out.push(*d as u8);
                selector(out, customer);
            }
            Input::Delivery { w, carrier, date } => {
                out.push(DELIVERY);
                out.extend_from_slice(&w.to_le_bytes());
                out.push(*carrier);
                out.extend_from_slice(&date.to_le_bytes());
            }
            Input::StockLevel { w, d, threshold } => {
                out.push(STOCK_LEVEL);
                out.extend_from_slice(&w.to_le_bytes());
                out.push(*d as u8);
                out.push(*threshold);
            }
        }
    }

    /// Decode `bytes` for a database of `config`, checking every field.
    pub fn decode(bytes: &[u8], config: &TpccConfig) -> Result<Input, TpccError> {
        let mut reader = Reader { bytes, at: 0 };
        let kind = reader.u8("kind")?;
        let input = match kind {
            LOAD => Input::Load,
            NEW_ORDER => {
                let w = reader.warehouse(config)?;
                let d = reader.district()?;
                let c = reader.customer(config)?;
                let entry_d = reader.u64("entry date")?;
                let count = reader.u8("line count")? as usize;
                if count == 0 || count > MAX_ORDER_LINES {
                    return Err(bad(format!("{count} order lines (1..=15)")));
                }
                let mut lines = Vec::with_capacity(count);
                for number in 0..count {
                    let item = reader.u32("item")?;
                    // items + 1 is the unused id of a rolled-back New-Order: last line only.
                    let limit = config.items + (number + 1 == count) as u32;
                    if item == 0 || item > limit {
                        return Err(bad(format!("item {item} in line {number}")));
                    }
                    let supply_w = reader.warehouse(config)?;
                    let quantity = reader.u8("quantity")?;
                    if !(1..=10).contains(&quantity) {
                        return Err(bad(format!("quantity {quantity}")));
                    }
                    lines.push(OrderLineInput {
                        item,
                        supply_w,
                        quantity,
                    });
                }
                Input::NewOrder {
                    w,
                    d,
                    c,
                    entry_d,
                    lines,
                }
            }
            PAYMENT => {
                let w = reader.warehouse(config)?;
                let d = reader.district()?;
                let c_w = reader.warehouse(config)?;
                let c_d = reader.district()?;
                let customer = reader.selector(config)?;
                let amount = reader.u64("amount")?;
                if !(1..=500_000).contains(&amount) {
                    return Err(bad(format!("payment amount {amount}")));
                }
                let date = reader.u64("date")?;
                Input::Payment {
                    w,
                    d,
                    c_w,
                    c_d,
                    customer,
                    amount,
                    date,
                }
            }
            ORDER_STATUS => Input::OrderStatus {
                w: reader.warehouse(config)?,
                d: reader.district()?,
                customer: reader.selector(config)?,
            },
            DELIVERY => {
                let w = reader.warehouse(config)?;
                let carrier = reader.u8("carrier")?;
                if !(1..=10).contains(&carrier) {
                    return Err(bad(format!("carrier {carrier}")));
                }
                Input::Delivery {
                    w,
                    carrier,
                    date: reader.u64("date")?,
                }
            }
            STOCK_LEVEL => {
                let w = reader.warehouse(config)?;
                let d = reader.district()?;
                let threshold = reader.u8("threshold")?;
                if !(10..=20).contains(&threshold) {
                    return Err(bad(format!("threshold {threshold}")));
                }
                Input::StockLevel { w, d, threshold }
            }
            other => return Err(bad(format!("unknown kind {other}"))),
        };
        if reader.at != bytes.len() {
            return Err(bad(format!(
                "{} bytes after a {}",
                bytes.len() - reader.at,
                input.name()
            )));
        }
        Ok(input)
    }
}

fn bad(what: String) -> TpccError {
    TpccError::BadInput(what)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, length: usize, what: &str) -> Result<&[u8], TpccError> {
        let end = self.at + length;
        if end > self.bytes.len() {
            return Err(bad(format!(
                "{what}: {} bytes, {length} needed at offset {}",
                self.bytes.len() - self.at.min(self.bytes.len()),
                self.at
            )));
        }
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }
    fn u8(&mut self, what: &str) -> Result<u8, TpccError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, TpccError> {
        Ok(u16::from_le_bytes(
            self.take(2, what)?.try_into().expect("2"),
        ))
    }
    fn u32(&mut self, what: &str) -> Result<u32, TpccError> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4"),
        ))
    }
    fn u64(&mut self, what: &str) -> Result<u64, TpccError> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8"),
        ))
    }
    fn warehouse(&mut self, config: &TpccConfig) -> Result<u32, TpccError> {
        let w = self.u32("warehouse")?;
        if w == 0 || w > config.warehouses {
            return Err(bad(format!("warehouse {w} of {}", config.warehouses)));
        }
        Ok(w)
    }
    fn district(&mut self) -> Result<u32, TpccError> {
        let d = self.u8("district")? as u32;
        if d == 0 || d > DISTRICTS {
            return Err(bad(format!("district {d}")));
        }
        Ok(d)
    }
    fn customer(&mut self, config: &TpccConfig) -> Result<u32, TpccError> {
        let c = self.u32("customer")?;
        if c == 0 || c > config.customers_per_district {
            return Err(bad(format!(
                "customer {c} of {}",
                config.customers_per_district
            )));
        }
        Ok(c)
    }
    fn selector(&mut self, config: &TpccConfig) -> Result<Selector, TpccError> {
        match self.u8("selector")? {
            0 => Ok(Selector::Id(self.customer(config)?)),
            1 => {
                let last = self.u16("last name")?;
                if last > 999 {
                    return Err(bad(format!("last name {last}")));
                }
                Ok(Selector::LastName(last))
            }
            other => Err(bad(format!("selector {other}"))),
        }
    }
}

/// TPC-C's non-uniform random number NURand(A, x, y) with run constant `c`.
pub(super) fn nurand(rng: &mut Rng, a: u64, c: u64, x: u64, y: u64) -> u64 {
    (((rng.in_range(0..a + 1) | rng.in_range(x..y + 1)) + c) % (y - x + 1)) + x
}

/// The deterministic stream of transaction inputs of a run: the standard mix (New-Order 45 %,
/// Payment 43 %, Order-Status, Delivery and Stock-Level 4 % each), uniform home warehouse and
/// district, TPC-C's NURand customer and item choices, 1 % remote order lines (with more than one
/// warehouse), 15 % remote payments, 60 % of customer selections by last name, and 1 % of
/// New-Orders rolled back by an unused item id in their last line.
pub struct Generator {
    rng: Rng,
    config: TpccConfig,
    /// NURand's run constants for C_LAST, C_ID and OL_I_ID.
    c_last: u64,
    c_id: u64,
    ol_i_id: u64,
    count: u64,
}

impl Generator {
    /// The input stream of a database of `config` with seed `seed` (the same stream every time).
    pub fn new(config: TpccConfig, seed: u64) -> Generator {
        let mut rng = Rng::new(seed ^ 0x7C7C_1A9E_5EED_0001);
        let c_last = rng.below(256);
        let c_id = rng.below(1024);
        let ol_i_id = rng.below(8192);
        Generator {
            rng,
            config,
            c_last,
            c_id,
            ol_i_id,
            count: 0,
        }
    }

    /// Inputs generated so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    fn warehouse(&mut self) -> u32 {
        self.rng.in_range(1..self.config.warehouses as u64 + 1) as u32
    }

    fn other_warehouse(&mut self, home: u32) -> u32 {
        if self.config.warehouses == 1 {
            return home;
        }
        let other = self.rng.in_range(1..self.config.warehouses as u64) as u32;
        if other >= home {
            other + 1
        } else {
            other
        }
    }

    fn district(&mut self) -> u32 {
        self.rng.in_range(1..DISTRICTS as u64 + 1) as u32
    }

    fn customer_id(&mut self) -> u32 {
        let customers = self.config.customers_per_district as u64;
        nurand(&mut self.rng, 1023, self.c_id, 1, customers) as u32
    }

    fn selector(&mut self) -> Selector {
        if self.rng.chance(60, 100) {
            Selector::LastName(nurand(&mut self.rng, 255, self.c_last, 0, 999) as u16)
        } else {
            Selector::Id(self.customer_id())
        }
    }

    /// The next input.
    pub fn next_input(&mut self) -> Input {
        self.count += 1;
        let date = self.count;
        let w = self.warehouse();
        match self.rng.below(100) {
            0..=44 => {
                let d = self.district();
                let c = self.customer_id();
                let count = self.rng.in_range(5..16) as usize;
                let rollback = self.rng.chance(1, 100);
                let items = self.config.items as u64;
                let lines = (0..count)
                    .map(|number| {
                        let item = if rollback && number + 1 == count {
                            self.config.items + 1
                        } else {
                            nurand(&mut self.rng, 8191, self.ol_i_id, 1, items) as u32
                        };
                        let supply_w = if self.rng.chance(1, 100) {
                            self.other_warehouse(w)
                        } else {
                            w
                        };
                        OrderLineInput {
                            item,
                            supply_w,
                            quantity: self.rng.in_range(1..11) as u8,
                        }
                    })
                    .collect();
                Input::NewOrder {
                    w,
                    d,
                    c,
                    entry_d: date,
                    lines,
                }
            }
            45..=87 => {
                let d = self.district();
                let (c_w, c_d) = if self.rng.chance(85, 100) {
                    (w, d)
                } else {
                    (self.other_warehouse(w), self.district())
                };
                Input::Payment {
                    w,
                    d,
                    c_w,
                    c_d,
                    customer: self.selector(),
                    amount: self.rng.in_range(100..500_001),
                    date,
                }
            }
            88..=91 => Input::OrderStatus {
                w,
                d: self.district(),
                customer: self.selector(),
            },
            92..=95 => Input::Delivery {
                w,
                carrier: self.rng.in_range(1..11) as u8,
                date,
            },
            _ => Input::StockLevel {
                w,
                d: self.district(),
                threshold: self.rng.in_range(10..21) as u8,
            },
        }
    }
}
